"""gpuctl's tests: pure ones, and ones that run .venv/bin/gpuctl against the stack."""
