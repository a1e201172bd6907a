#!/usr/bin/env python3
"""rdmaflow_torch.export_graph (torch.fx) against the TorchScript importer
(rdmaflow plan MODEL.pt --graph): the same graph for the same model, for an
MLP, a ResNet-18-like CNN and a transformer encoder (test_models.py); each
exported graph planned for every strategy; export_graph leaves the model as
it was; bad models are refused with the reason.

  export_graph_test.py RDMAFLOW_CLI TEST_MODELS_DIR WORK_DIR
"""
import os
import subprocess
import sys
import unittest

import torch

CLI, MODELS_DIR, WORK = sys.argv[1:4]
sys.path.insert(0, MODELS_DIR)
import rdmaflow_torch  # noqa: E402
import test_models  # noqa: E402

BATCH = 8
STRATEGIES = ["ps:servers=2,workers=2", "allreduce:workers=2",
              "layer_separated:conv=2,fc=1"]


def input_sizes(name):
    _, sample, dtype, _ = test_models.MODELS[name]
    sizes = "x".join(str(d) for d in [BATCH] + sample)
    return sizes + (":int64" if dtype == torch.int64 else "")


def plan(*args):
    return subprocess.run([CLI, "plan", *args], capture_output=True, text=True)


def strip_comments(text):
    return "".join(line for line in text.splitlines(True) if not line.startswith("#"))


class ExportGraphTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        os.makedirs(WORK, exist_ok=True)
        subprocess.run([sys.executable, os.path.join(MODELS_DIR, "test_models.py"), WORK,
                        *sorted(test_models.MODELS)], check=True)

    def test_both_importers_give_the_same_graph(self):
        for name in sorted(test_models.MODELS):
            with self.subTest(model=name):
                ts_graph = os.path.join(WORK, f"{name}_ts.pbtxt")
                result = plan(os.path.join(WORK, f"{name}.pt"), "--input", input_sizes(name),
                              "--graph", ts_graph, "--quiet")
                self.assertEqual(result.returncode, 0, result.stderr)
                fx_text = rdmaflow_torch.graph_text(
                    test_models.build(name), test_models.example_input(name, BATCH), name=name)
                with open(ts_graph) as f:
                    ts_text = strip_comments(f.read())
                self.assertIn("ApplyGradient", fx_text)
                self.assertEqual(ts_text, fx_text)

    def test_exported_graphs_plan_for_every_strategy(self):
        for name in sorted(test_models.MODELS):
            path = rdmaflow_torch.export_graph(
                test_models.build(name), test_models.example_input(name, BATCH),
                os.path.join(WORK, f"{name}_fx.pbtxt"), name=name)
            for strategy in STRATEGIES:
                with self.subTest(model=name, strategy=strategy):
                    result = plan(path, "--strategy", strategy, "--quiet")
                    self.assertEqual(result.returncode, 0, result.stderr)
                    self.assertIn(f"plan '{name} (", result.stdout)
                    if not strategy.startswith("allreduce"):
                        self.assertNotIn(" 0 transfers", result.stdout)

    def test_tuples_tied_weights_and_multi_input_modules(self):
        # The TorchScript importer and torch.fx agree on a submodule that
        # returns a tuple and a weight two layers share.
        subprocess.run([sys.executable, os.path.join(MODELS_DIR, "test_models.py"), WORK,
                        "tied_tuple"], check=True)
        ts_graph = os.path.join(WORK, "tied_tuple_ts.pbtxt")
        result = plan(os.path.join(WORK, "tied_tuple.pt"), "--input", "4x8", "--graph", ts_graph,
                      "--quiet")
        self.assertEqual(result.returncode, 0, result.stderr)
        torch.manual_seed(0)
        fx_text = rdmaflow_torch.graph_text(test_models.TiedTuple(), torch.randn(4, 8),
                                            name="tied_tuple")
        self.assertIn('name: "head.weight/apply"', fx_text)
        self.assertNotIn('name: "out.weight"', fx_text)
        with open(ts_graph) as f:
            ts_text = strip_comments(f.read())
        # Both have the same parameters, and each of them is updated.
        for text in (ts_text, fx_text):
            self.assertEqual(text.count('op: "Variable"'), 5)
            self.assertEqual(text.count('op: "ApplyGradient"'), 5)

        # A leaf module given two tensors keeps both edges.
        class TwoInputs(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.proj = torch.nn.Linear(4, 4)
                self.bilinear = torch.nn.Bilinear(4, 4, 3)

            def forward(self, x):
                return self.bilinear(x, self.proj(x))

        text = rdmaflow_torch.graph_text(TwoInputs(), torch.randn(2, 4))
        self.assertIn('name: "proj.weight/apply"', text)
        self.assertIn('s: "python::Bilinear"', text)

    def test_export_leaves_the_model_as_it_was(self):
        model = test_models.build("resnet18")
        before = {k: v.clone() for k, v in model.state_dict().items()}
        rdmaflow_torch.graph_text(model, test_models.example_input("resnet18", BATCH))
        for key, value in model.state_dict().items():
            self.assertTrue(torch.equal(before[key], value), key)

    def test_bad_models_are_refused_with_the_reason(self):
        class TwoOutputs(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = torch.nn.Linear(4, 2)

            def forward(self, x):
                return self.fc(x), x

        with self.assertRaisesRegex(ValueError, "must return one tensor"):
            rdmaflow_torch.graph_text(TwoOutputs(), torch.randn(2, 4))

        class NoParameters(torch.nn.Module):
            def forward(self, x):
                return torch.relu(x)

        with self.assertRaisesRegex(ValueError, "no trainable parameters"):
            rdmaflow_torch.graph_text(NoParameters(), torch.randn(2, 4))
        with self.assertRaises(RuntimeError):  # the shapes do not fit the model
            rdmaflow_torch.graph_text(test_models.build("mlp"), torch.randn(2, 5))


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0], "-v"])
