"""gpuctl, the command line of the GPU control plane: it speaks to /api/v1 over HTTP and
imports nothing of the product."""

__version__ = "0.1.0"
