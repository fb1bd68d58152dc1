"""The CEL engine of `common-expression-language`, imported without its interactive shell.

The package's `cel/__init__.py` imports `cel.cli`, a REPL built on prompt_toolkit, rich, typer
and pygments: about 24 MB resident in every process that validates a selector (web, worker,
observer, the simulated cluster), for a shell the product never opens. Here the package object
is created from its spec without running that `__init__`, and only the compiled engine
(`cel.cel`, typed by the package's `cel.pyi`) and its standard-library extensions
(`cel.stdlib`) are loaded into it. If something has already imported `cel` the normal way, that
package is used as it is."""

from __future__ import annotations

import importlib.util
import sys


def _package_without_shell() -> None:
    if "cel" in sys.modules:
        return
    spec = importlib.util.find_spec("cel")
    if spec is None or spec.submodule_search_locations is None:
        raise ImportError("the common-expression-language package (`cel`) is not installed")
    sys.modules["cel"] = importlib.util.module_from_spec(spec)


_package_without_shell()

from cel.cel import Context, Program, compile  # noqa: E402
from cel.stdlib import add_stdlib_to_context  # noqa: E402

__all__ = ["Context", "Program", "add_stdlib_to_context", "compile"]
