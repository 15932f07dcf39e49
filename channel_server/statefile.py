"""Small JSON state files of clients (publisher sequences, last ids, script progress).

Written atomically (temp file, fsync, rename), so a crash leaves the old or the new
state, never a torn one.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

STATE_DIR_ENV = "PUBSUB_STATE_DIR"


def default_state_dir() -> Path:
    """``$PUBSUB_STATE_DIR``, else ``$XDG_STATE_HOME/pubsub-channels``, else
    ``~/.local/state/pubsub-channels``."""
    if env := os.environ.get(STATE_DIR_ENV):
        return Path(env)
    base = os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state"
    return Path(base) / "pubsub-channels"


class StateFile:
    """A JSON object on disk."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except ValueError:
            raise ValueError(f"{self.path}: not a JSON state file; fix or remove it") from None
        if not isinstance(data, dict):
            raise ValueError(f"{self.path}: not a JSON object; fix or remove it")
        return data

    def save(self, data: dict[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        with tmp.open("w", encoding="utf-8") as f:
            json.dump(data, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)

    def update(self, **changes: Any) -> dict[str, Any]:
        data = self.load()
        data.update(changes)
        self.save(data)
        return data
