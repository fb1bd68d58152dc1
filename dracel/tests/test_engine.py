"""The CEL engine loads without the package's interactive shell."""

import subprocess
import sys

SHELL = ("cel.cli", "prompt_toolkit", "rich", "typer", "pygments")


def test_importing_dracel_leaves_the_cel_shell_out():
    probe = (
        "import sys, dracel\n"
        "selector = dracel.compile_selector('device.driver == \"d\"')\n"
        "assert dracel.device_matches([selector], dracel.device_env('d', {'name': 'x'}))\n"
        "print(sorted(m for m in sys.modules if m in SHELL or m.split('.')[0] in SHELL))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", f"SHELL = {SHELL!r}\n{probe}"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert result.stdout.strip() == "[]"
