"""gpuctl's command groups, one module per part of the API."""
