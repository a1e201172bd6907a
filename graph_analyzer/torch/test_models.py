#!/usr/bin/env python3
"""The PyTorch models rdmaflow's importers are tested on, built at test time.

  test_models.py OUT_DIR [NAME ...]

writes, per model, NAME.pt (the module traced with torch.jit.trace and
saved) and NAME.json (its input shape and dtype, class count and parameter
shapes), run by the build's torch (tools/torch_python.sh). Models:

  mlp          784-128-64-10 on 1x28x28 images
  resnet18     a ResNet-18-like CNN: a 3x3 stem, four stages of two basic
               blocks (16, 32, 64, 128 channels, batch norm, strided 1x1
               shortcuts), global average pooling, a 10-way classifier
  transformer  a small encoder on int64 token ids [N, 16]: embedding plus a
               learned position table, two layers of single-head attention
               and a ReLU feed-forward, each with layer norm and a residual,
               mean over positions, a 10-way classifier

and, when named, control_flow.pt: a scripted module that branches on its
input's values (which a graph of one step cannot hold), loop.pt: a scripted
module with a loop over its input's first size, data_loop.pt: one with a loop
on its input's values, tied_tuple.pt: a submodule that returns a tuple, and a
weight two layers share; export:NAME, export_dynamic:NAME and export_core:NAME
write NAME.pt2, NAME_dynamic.pt2 and NAME_core.pt2 (torch.export.save of the
model exported on a batch of 4: as exported, with a dynamic batch, and
decomposed to core ATen), forged:WHAT writes forged_WHAT.pt2 (a broken
mlp.pt2, see save_forged), scripted_resnet18.pt: resnet18 scripted rather than
traced (its batch norms branch on `training`), and scripted_encoder.pt: a
scripted nn.TransformerEncoderLayer classifier on [N, 16] token ids (its
fast-path checks branch on flags and shapes) whose head branches on the
activation's rank.
"""
import json
import math
import os
import sys

import torch
from torch import nn
import torch.nn.functional as F


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.flatten = nn.Flatten()
        self.fc1 = nn.Linear(784, 128)
        self.fc2 = nn.Linear(128, 64)
        self.fc3 = nn.Linear(64, 10)

    def forward(self, x):
        x = self.flatten(x)
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc3(x)


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = None
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        skip = x if self.shortcut is None else self.shortcut(x)
        return F.relu(out + skip)


class ResNet18(nn.Module):
    def __init__(self, channels=1, classes=10):
        super().__init__()
        self.stem = nn.Conv2d(channels, 16, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(16)
        blocks = []
        cin = 16
        for i, cout in enumerate([16, 32, 64, 128]):
            for j in range(2):
                blocks.append(BasicBlock(cin, cout, 2 if (j == 0 and i > 0) else 1))
                cin = cout
        self.blocks = nn.Sequential(*blocks)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(128, classes)

    def forward(self, x):
        x = F.relu(self.bn(self.stem(x)))
        x = self.blocks(x)
        x = torch.flatten(self.pool(x), 1)
        return self.fc(x)


class EncoderLayer(nn.Module):
    def __init__(self, d, hidden):
        super().__init__()
        self.norm1 = nn.LayerNorm(d)
        self.q = nn.Linear(d, d)
        self.k = nn.Linear(d, d)
        self.v = nn.Linear(d, d)
        self.out = nn.Linear(d, d)
        self.norm2 = nn.LayerNorm(d)
        self.ff1 = nn.Linear(d, hidden)
        self.ff2 = nn.Linear(hidden, d)
        self.scale = 1.0 / math.sqrt(d)

    def forward(self, x):
        h = self.norm1(x)
        scores = torch.matmul(self.q(h), self.k(h).transpose(1, 2)) * self.scale
        attention = torch.matmul(F.softmax(scores, dim=-1), self.v(h))
        x = x + self.out(attention)
        return x + self.ff2(F.relu(self.ff1(self.norm2(x))))


class Transformer(nn.Module):
    def __init__(self, vocab=100, length=16, d=32, hidden=64, layers=2, classes=10):
        super().__init__()
        self.embedding = nn.Embedding(vocab, d)
        self.position = nn.Parameter(torch.randn(length, d) * 0.02)
        self.layers = nn.Sequential(*[EncoderLayer(d, hidden) for _ in range(layers)])
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, classes)

    def forward(self, tokens):
        x = self.embedding(tokens) + self.position
        x = self.norm(self.layers(x))
        return self.head(x.mean(dim=1))


# name -> (constructor, one sample's shape, input dtype, classes)
MODELS = {
    "mlp": (Mlp, [1, 28, 28], torch.float32, 10),
    "resnet18": (ResNet18, [1, 28, 28], torch.float32, 10),
    "transformer": (Transformer, [16], torch.int64, 10),
}


class ControlFlow(nn.Module):
    """Scripted with a branch on data: the importer refuses it."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)

    def forward(self, x):
        if bool(x.sum() > 0):
            x = x * 2
        return self.fc(x)


class Loop(nn.Module):
    """Scripted with a loop over a size: the importer unrolls it."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        for _ in range(x.size(0)):
            x = self.fc(x)
        return x


class DataLoop(nn.Module):
    """Scripted with a loop on its input's values: the importer refuses it."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        while bool(x.sum() < 10.0):
            x = x + 1.0
        return self.fc(x)


class ScriptedEncoder(nn.Module):
    """nn.TransformerEncoderLayer, scripted: branches on flags and shapes."""

    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(100, 32)
        self.layer = nn.TransformerEncoderLayer(32, 2, 64, dropout=0.0, batch_first=True)
        self.head = nn.Linear(32, 10)

    def forward(self, tokens):
        x = self.layer(self.embedding(tokens))
        if x.dim() == 3:
            x = x.mean(dim=1)
        return self.head(x)


class Features(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 6)

    def forward(self, x):
        h = torch.relu(self.fc(x))
        return h, h.size(1)


class TiedTuple(nn.Module):
    """A submodule returning a tuple, and a weight shared by two layers."""

    def __init__(self):
        super().__init__()
        self.features = Features()
        self.head = nn.Linear(6, 6)
        self.out = nn.Linear(6, 6)
        self.out.weight = self.head.weight

    def forward(self, x):
        h, width = self.features(x)
        return self.out(torch.relu(self.head(h))) * (1.0 / width)


def example_input(name, batch):
    _, sample, dtype, _ = MODELS[name]
    if dtype == torch.int64:
        return torch.randint(0, 100, [batch] + sample)
    return torch.randn([batch] + sample)


def build(name):
    torch.manual_seed(0)
    return MODELS[name][0]()


def save_exported(out, how, name):
    """torch.export of model `name` (batch 4) as NAME.pt2 (export:),
    NAME_dynamic.pt2 with a dynamic batch (export_dynamic:), or NAME_core.pt2
    after run_decompositions, the core ATen op set (export_core:)."""
    module = build(name)
    dynamic = None
    if how == "export_dynamic":
        dynamic = ({0: torch.export.Dim("batch", min=1, max=1024)},)
    program = torch.export.export(module, (example_input(name, 4),), dynamic_shapes=dynamic)
    suffix = {"export": "", "export_dynamic": "_dynamic", "export_core": "_core"}[how]
    if how == "export_core":
        program = program.run_decompositions()
    torch.export.save(program, os.path.join(out, name + suffix + ".pt2"))


def save_forged(out, what):
    """mlp.pt2 (exported as export:mlp) rewritten into forged_WHAT.pt2: schema
    (export schema 99.0), op (a node calling an op LibTorch lacks), weights
    (a weight whose sizes need more bytes than its payload holds), json
    (models/model.json that is no JSON)."""
    import zipfile
    source = os.path.join(out, "mlp.pt2")
    if not os.path.exists(source):
        save_exported(out, "export", "mlp")
    target = os.path.join(out, f"forged_{what}.pt2")
    with zipfile.ZipFile(source) as zin, zipfile.ZipFile(target, "w", zipfile.ZIP_STORED) as zout:
        for item in zin.infolist():
            data = zin.read(item.filename)
            root, _, rest = item.filename.partition("/")
            if rest == "models/model.json":
                program = json.loads(data)
                if what == "schema":
                    program["schema_version"] = {"major": 99, "minor": 0}
                elif what == "op":
                    program["graph_module"]["graph"]["nodes"][1]["target"] = \
                        "torch.ops.aten.no_such_op.default"
                data = b"not json" if what == "json" else json.dumps(program).encode()
            elif rest == "data/weights/model_weights_config.json" and what == "weights":
                config = json.loads(data)
                meta = config["config"]["fc1.weight"]["tensor_meta"]
                meta["sizes"][0]["as_int"] *= 1000
                data = json.dumps(config).encode()
            zout.writestr(item.filename.replace(root, f"forged_{what}", 1)
                          if root == "mlp" else item.filename, data)


def main(argv):
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        print(__doc__)
        return 0 if len(argv) >= 2 else 2
    out = argv[1]
    os.makedirs(out, exist_ok=True)
    for name in argv[2:] or sorted(MODELS):
        if name == "control_flow":
            torch.jit.script(ControlFlow()).save(os.path.join(out, name + ".pt"))
            continue
        if name in ("loop", "data_loop"):
            module = Loop() if name == "loop" else DataLoop()
            torch.jit.script(module).save(os.path.join(out, name + ".pt"))
            continue
        if name == "scripted_resnet18":
            torch.jit.script(build("resnet18")).save(os.path.join(out, name + ".pt"))
            continue
        if name == "scripted_encoder":
            torch.manual_seed(0)
            torch.jit.script(ScriptedEncoder()).save(os.path.join(out, name + ".pt"))
            continue
        if name == "tied_tuple":
            torch.manual_seed(0)
            torch.jit.trace(TiedTuple(), torch.randn(4, 8)).save(os.path.join(out, name + ".pt"))
            continue
        if name.startswith("forged:"):
            save_forged(out, name.split(":", 1)[1])
            continue
        if name.startswith("export:") or name.startswith("export_dynamic:") or \
                name.startswith("export_core:"):
            how, model = name.split(":", 1)
            save_exported(out, how, model)
            continue
        if name not in MODELS:
            print(f"unknown model '{name}'; known: {', '.join(sorted(MODELS))}",
                  file=sys.stderr)
            return 2
        module = build(name)
        traced = torch.jit.trace(module, example_input(name, 4))
        traced.save(os.path.join(out, name + ".pt"))
        _, sample, dtype, classes = MODELS[name]
        manifest = {
            "sample": sample,
            "dtype": str(dtype).replace("torch.", ""),
            "classes": classes,
            "parameters": {n: list(p.shape) for n, p in module.named_parameters()},
            "buffers": {n: list(b.shape) for n, b in module.named_buffers()},
        }
        with open(os.path.join(out, name + ".json"), "w") as f:
            json.dump(manifest, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
