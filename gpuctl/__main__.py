"""`python -m gpuctl`, the same as the `gpuctl` command."""

from gpuctl.main import main

main()
