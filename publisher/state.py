"""The publisher's sequence file: a restarted publisher never reuses an event id.

Before a batch is sent, the sequence number after it is written (atomically, by rename),
so a crash mid-batch skips numbers rather than repeating them.
"""

from __future__ import annotations

import os
from pathlib import Path

STATE_DIR_ENV = "PUBSUB_STATE_DIR"


def default_state_dir() -> Path:
    """``$PUBSUB_STATE_DIR``, else ``$XDG_STATE_HOME/pubsub-channels``, else
    ``~/.local/state/pubsub-channels``."""
    if env := os.environ.get(STATE_DIR_ENV):
        return Path(env)
    base = os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state"
    return Path(base) / "pubsub-channels"


class SequenceFile:
    """The next sequence number of one publisher on one channel."""

    def __init__(self, state_dir: Path, channel: str, publisher_id: str) -> None:
        self.path = state_dir / f"publisher-{channel}-{publisher_id}.seq"

    def load(self) -> int | None:
        try:
            return int(self.path.read_text(encoding="ascii").strip())
        except FileNotFoundError:
            return None
        except ValueError:
            raise ValueError(f"{self.path}: not a sequence number; fix or remove it") from None

    def reserve(self, next_seq: int) -> None:
        """Record that numbers below ``next_seq`` are (about to be) used."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        with tmp.open("w", encoding="ascii") as f:
            f.write(f"{next_seq}\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
