"""Run Python code in a child process where some modules cannot be imported, as in an
install without the extra that brings them (``sys.modules[name] = None`` makes an import of
it raise ImportError)."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def run_without(
    modules: tuple[str, ...], code: str, *args: str
) -> subprocess.CompletedProcess[str]:
    """``code`` (dedented) run by this interpreter with ``modules`` blocked; ``args`` are
    its ``sys.argv[1:]``."""
    blocked = "".join(f"import sys; sys.modules[{name!r}] = None\n" for name in modules)
    return subprocess.run(
        [sys.executable, "-c", blocked + textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
