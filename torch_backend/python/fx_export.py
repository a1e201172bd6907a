# fx_export.py: rdmaflow_torch.export_graph, the torch.fx importer of a
# PyTorch model. Built into the rdmaflow_torch module (this file is compiled
# in and run when the module is imported), so it reads as part of it:
#
#   import rdmaflow_torch
#   rdmaflow_torch.export_graph(model, torch.randn(64, 1, 28, 28), "model.pbtxt")
#
# torch.fx traces the module symbolically and ShapeProp runs it once on the
# example inputs (on a copy: batch norm statistics of the model stay as they
# were), which gives every tensor's dtype and shape. Each call becomes one op
# of a model trace named as TorchScript names it ("aten::linear",
# "aten::conv2d", ...), and the C++ side that the TorchScript importer also
# ends in (graph_analyzer/training_graph.h) builds the training step's
# graph, so that both importers give the same graph for the same model.
# Ops are recorded only when they read an input or a parameter and produce
# a tensor (sizes and constants only feed them). docs/bring_your_model.md.
import copy as _copy
import json as _json
import operator as _operator

import torch as _torch
import torch.fx as _fx
from torch.fx.operator_schemas import normalize_function as _normalize_function
from torch.fx.passes.shape_prop import ShapeProp as _ShapeProp
from torch.fx.passes.shape_prop import TensorMetadata as _TensorMetadata

_DTYPES = {
    _torch.float32: "DT_FLOAT32", _torch.float16: "DT_FLOAT16",
    _torch.bfloat16: "DT_BFLOAT16", _torch.float64: "DT_FLOAT64",
    _torch.int8: "DT_INT8", _torch.uint8: "DT_UINT8", _torch.int32: "DT_INT32",
    _torch.int64: "DT_INT64", _torch.bool: "DT_BOOL",
}

# Python operators under the names of the aten ops they call.
_OPERATORS = {
    _operator.add: "add", _operator.iadd: "add", _operator.sub: "sub",
    _operator.mul: "mul", _operator.imul: "mul", _operator.truediv: "div",
    _operator.matmul: "matmul", _operator.neg: "neg", _operator.pow: "pow",
}

# Names of the leading non-tensor arguments of common calls made
# positionally, where torch.fx cannot name them.
_POSITIONAL = {
    "flatten": ["start_dim", "end_dim"], "mean": ["dim", "keepdim"],
    "sum": ["dim", "keepdim"], "softmax": ["dim"], "log_softmax": ["dim"],
    "transpose": ["dim0", "dim1"], "cat": ["dim"], "max_pool2d": ["kernel_size", "stride",
    "padding", "dilation", "ceil_mode"], "avg_pool2d": ["kernel_size", "stride", "padding",
    "ceil_mode"], "dropout": ["p", "train"],
}


def _spec(meta):
    if meta.dtype not in _DTYPES:
        raise ValueError(f"tensors of {meta.dtype} are not supported")
    return {"dtype": _DTYPES[meta.dtype], "shape": [int(d) for d in meta.shape]}


def _attr(value):
    """A constant argument as an AttrValue dict, or None."""
    if isinstance(value, bool):
        return {"b": value}
    if isinstance(value, int):
        return {"i": value}
    if isinstance(value, float):
        return {"f": value}
    if isinstance(value, str):
        return {"s": value}
    if isinstance(value, (list, tuple)) and all(
            isinstance(v, int) and not isinstance(v, bool) for v in value):
        return {"ints": list(value)}
    return None


def _module_call(name, module):
    """(aten kind, tensor attributes in aten argument order with the input
    as None, constant arguments) of a leaf module call."""
    nn = _torch.nn
    if isinstance(module, nn.Linear):
        return "aten::linear", [None, "weight", "bias"], {}
    if isinstance(module, nn.Conv2d) and isinstance(module.padding, tuple):
        return "aten::conv2d", [None, "weight", "bias"], {
            "stride": module.stride, "padding": module.padding,
            "dilation": module.dilation, "groups": module.groups}
    if isinstance(module, nn.modules.batchnorm._BatchNorm):
        return "aten::batch_norm", [None, "weight", "bias", "running_mean", "running_var"], {
            "training": module.training or module.running_mean is None,
            "momentum": module.momentum if module.momentum is not None else 0.0,
            "eps": module.eps}
    if isinstance(module, nn.LayerNorm):
        return "aten::layer_norm", [None, "weight", "bias"], {
            "normalized_shape": list(module.normalized_shape), "eps": module.eps}
    if isinstance(module, nn.Embedding):
        return "aten::embedding", ["weight", None], {}
    if isinstance(module, nn.Flatten):
        return "aten::flatten", [None], {"start_dim": module.start_dim,
                                         "end_dim": module.end_dim}
    if isinstance(module, nn.MaxPool2d):
        return "aten::max_pool2d", [None], {
            "kernel_size": module.kernel_size, "stride": module.stride,
            "padding": module.padding, "dilation": module.dilation,
            "ceil_mode": module.ceil_mode}
    if isinstance(module, nn.AvgPool2d):
        return "aten::avg_pool2d", [None], {
            "kernel_size": module.kernel_size, "stride": module.stride,
            "padding": module.padding, "ceil_mode": module.ceil_mode}
    if isinstance(module, nn.AdaptiveAvgPool2d):
        return "aten::adaptive_avg_pool2d", [None], {"output_size": module.output_size}
    if isinstance(module, nn.Dropout):
        return "aten::dropout", [None], {"p": module.p, "train": module.training}
    if isinstance(module, nn.Softmax):
        return "aten::softmax", [None], {"dim": module.dim}
    simple = {nn.ReLU: "relu", nn.Sigmoid: "sigmoid", nn.Tanh: "tanh", nn.GELU: "gelu"}
    for cls, kind in simple.items():
        if isinstance(module, cls):
            return "aten::" + kind, [None], {}
    # Anything else is carried whole, with all its parameters.
    return ("python::" + type(module).__name__,
            [None] + [n for n, _ in module.named_parameters()], {})


def _named_args(kind, target, args, kwargs):
    """The call's arguments by name where they can be named."""
    named = {}
    if callable(target) and not isinstance(target, str):
        try:
            pair = _normalize_function(target, tuple(args), dict(kwargs),
                                       normalize_to_only_use_kwargs=True)
        except Exception:  # an overload it cannot pick: fall back
            pair = None
        if pair is not None:
            return dict(pair.kwargs)
    names = _POSITIONAL.get(kind, [])
    for i, value in enumerate(args[1:]):
        named[names[i] if i < len(names) else f"arg{i + 1}"] = value
    named.update(kwargs)
    return named


def trace_model(module, example_inputs, name=None):
    """The model trace (graph_analyzer/model_trace.proto, as a dict) of one
    forward pass of `module` on `example_inputs` (a tensor or a tuple)."""
    if isinstance(example_inputs, _torch.Tensor):
        example_inputs = (example_inputs,)
    module = _copy.deepcopy(module)
    graph_module = _fx.symbolic_trace(module)
    with _torch.no_grad():
        _ShapeProp(graph_module).propagate(*example_inputs)
    # Deduplicated, first name first (tied weights are one parameter).
    parameters = dict(module.named_parameters())
    buffers = dict(module.named_buffers())
    canonical = {id(p): n for n, p in parameters.items()}
    canonical.update({id(b): n for n, b in buffers.items()})
    trace = {"name": name or type(module).__name__, "source": "torch.fx",
             "input": [], "parameter": [], "buffer": [], "op": []}
    for n, p in parameters.items():
        trace["parameter"].append({"name": n, "spec": _spec(p)})
    names = {}   # fx node -> tensor names (one, or one per element)
    live = {}    # fx node -> reads an input or a parameter
    declared = set(parameters)

    def tensors_of(node):
        meta = node.meta.get("tensor_meta")
        if meta is None:
            return []
        if not isinstance(meta, _TensorMetadata):  # a tuple or list of them
            return [(f"{node.name}.{j}", m) for j, m in enumerate(meta)]
        return [(node.name, meta)]

    def read(value, out, flags):
        """Collects the tensor names `value` (an argument) holds."""
        if isinstance(value, _fx.Node):
            out.extend(names.get(value, []))
            flags.append(live.get(value, False))
        elif isinstance(value, (list, tuple)):
            for v in value:
                read(v, out, flags)

    def declare_buffer(tensor):
        """A tensor a recorded op reads that nothing recorded produced."""
        if tensor not in declared:
            declared.add(tensor)
            trace["buffer"].append({"name": tensor, "spec": specs[tensor]})

    specs = {}
    for node in graph_module.graph.nodes:
        if node.op == "placeholder":
            (tensor, meta), = tensors_of(node)
            trace["input"].append({"name": tensor, "spec": _spec(meta)})
            declared.add(tensor)
            names[node], live[node], specs[tensor] = [tensor], True, _spec(meta)
            continue
        if node.op == "get_attr":
            target = canonical.get(id(_attribute(graph_module, node.target)), node.target)
            if target in parameters:
                names[node], live[node] = [target], True
                specs[target] = _spec(parameters[target])
            elif target in buffers:
                names[node], live[node] = [target], False
                specs[target] = _spec(buffers[target])
            continue
        if node.op == "output":
            result = node.args[0]
            if not isinstance(result, _fx.Node) or len(names.get(result, [])) != 1:
                raise ValueError("forward() must return one tensor (the logits or the "
                                 "output the loss is taken of)")
            trace["output"] = names[result][0]
            continue
        if node.op == "call_function" and node.target is _operator.getitem and \
                isinstance(node.args[0], _fx.Node) and len(names.get(node.args[0], [])) > 1:
            names[node] = [names[node.args[0]][node.args[1]]]
            live[node] = live.get(node.args[0], False)
            continue

        inputs, flags = [], []
        if node.op == "call_module":
            module_here = graph_module.get_submodule(node.target)
            kind, order, constants = _module_call(node.target, module_here)
            arguments = []  # every tensor the call is given, in order
            for a in node.args:
                read(a, arguments, flags)
            for v in node.kwargs.values():
                read(v, arguments, flags)
            own = dict(module_here.named_parameters())
            own_buffers = dict(module_here.named_buffers())
            for attribute in order:
                if attribute is None:
                    inputs.extend(arguments)
                    continue
                if attribute in own:
                    inputs.append(canonical[id(own[attribute])])
                    flags.append(True)
                elif own_buffers.get(attribute) is not None:
                    qualified = canonical.get(id(own_buffers[attribute]),
                                              f"{node.target}.{attribute}")
                    inputs.append(qualified)
                    specs[qualified] = _spec(own_buffers[attribute])
            args = constants
        else:
            target = node.target
            if node.op == "call_method":
                short = target
                function = getattr(_torch, target, None)
            else:
                short = _OPERATORS.get(target, getattr(target, "__name__", str(target)))
                function = target
            kind = "aten::" + short
            for a in node.args:
                read(a, inputs, flags)
            for v in node.kwargs.values():
                read(v, inputs, flags)
            args = {}
            named = _named_args(short, function, node.args, node.kwargs)
            for key, value in named.items():
                if isinstance(value, (_fx.Node, list, tuple)) and _has_node(value):
                    continue
                if value is None:
                    continue
                args[key] = value
        outputs = tensors_of(node)
        names[node] = [t for t, _ in outputs]
        for t, m in outputs:
            specs[t] = _spec(m)
        live[node] = any(flags)
        if not live[node] or not outputs:
            continue
        for tensor in inputs:
            declare_buffer(tensor)
        op = {"kind": kind, "input": inputs, "arg": {}, "output": [], "output_spec": []}
        for key, value in args.items():
            attr = _attr(value)
            if attr is not None:
                op["arg"][key] = attr
        for t, m in outputs:
            op["output"].append(t)
            op["output_spec"].append(_spec(m))
            declared.add(t)
        trace["op"].append(op)
    return trace


def _attribute(graph_module, target):
    """What get_attr `target` ("layers.0.position") names."""
    value = graph_module
    for part in target.split("."):
        value = getattr(value, part)
    return value


def _has_node(value):
    if isinstance(value, _fx.Node):
        return True
    if isinstance(value, (list, tuple)):
        return any(_has_node(v) for v in value)
    return False


def graph_text(module, example_inputs, name=None, rank=0):
    """The training step's GraphDef of `module` (graph.proto text)."""
    return _training_graph_text(_json.dumps(trace_model(module, example_inputs, name)), rank)


def export_graph(module, example_inputs, path, name=None, rank=0):
    """Writes the GraphDef of `module`'s training step, as graph.proto text,
    to `path`, for `rdmaflow plan`. Returns the path."""
    text = graph_text(module, example_inputs, name, rank)
    with open(path, "w") as f:
        f.write(text)
    return path
