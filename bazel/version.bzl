"""rdmaflow's version: the one //:install, the wheel and rdmaflow_torch.__version__ name."""

RDMAFLOW_VERSION = "0.1.0"
