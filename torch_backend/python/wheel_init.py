"""rdmaflow_torch: the "rdmaflow" backend for torch.distributed over one-sided
RDMA writes (docs/torch.md). `import rdmaflow_torch` registers it.

This package holds the compiled module (rdmaflow_torch/rdmaflow_torch*.so),
built against one torch release: importing it under another fails here, at
once, naming both, before the compiled code is loaded. The package then
becomes that module (the same object a build's rdmaflow_torch.so gives).
"""
import importlib as _importlib
import sys as _sys

import torch as _torch

__version__ = "@VERSION@"
__torch_version__ = "@TORCH_VERSION@"


def _release(version):
    # "2.11.0+cu130" and "2.11.0+cpu" are one release (the local part names
    # the CUDA build, not the C++ API).
    return version.split("+")[0]


if _release(_torch.__version__) != _release(__torch_version__):
    raise ImportError(
        f"rdmaflow_torch {__version__} was built for torch {__torch_version__} but this "
        f"Python imports torch {_torch.__version__}; install the rdmaflow_torch wheel built "
        f"for torch {_release(_torch.__version__)}, or build one against this torch "
        "(tools/build_wheel.sh with RDMAFLOW_PYTHON set to this Python; docs/torch.md)")

_sys.modules[__name__] = _importlib.import_module(".rdmaflow_torch", __name__)
