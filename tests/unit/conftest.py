import importlib
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

# Detailed assertion messages from the shared invariant checks, as in the test modules.
pytest.register_assert_rewrite("tests.unit.group_checks")


@pytest.fixture
def import_script(monkeypatch: pytest.MonkeyPatch) -> Callable[[str], ModuleType]:
    """Import one of scripts/ by module name (they import each other from that folder)."""
    monkeypatch.syspath_prepend(str(SCRIPTS))
    return importlib.import_module


SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
