"""Scenario files: YAML steps run in order by a publisher or subscriber client (DESIGN §12).

```yaml
steps:
  - {topic: news, action: subscribe}
  - {topic: news, message: "hello {n}", repeat: 3, sleep_between: 0.1, sleep_after: 1}
  - {topic: news, action: get, repeat: 3}
```

Each repetition of a step is one unit of work. After each unit the number done is saved
in the client's state file (private, see :mod:`channel_client.statefile`), so a client
restarted with the same file resumes after its last completed unit (a changed file starts
over, and so does ``--restart``). The summary line says when units were skipped because an
earlier run completed them, so a re-run that does nothing says why.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from channel_client.statefile import StateFile
from channel_server.wire import check_name

log = logging.getLogger(__name__)
STEP_KEYS = {"topic", "message", "action", "repeat", "sleep_between", "sleep_after"}


@dataclass(frozen=True)
class Step:
    number: int
    topic: str
    action: str
    message: str | None = None
    repeat: int = 1
    sleep_between_s: float = 0.0
    sleep_after_s: float = 0.0

    def text(self, n: int) -> str:
        """The message of repetition ``n`` (1-based); ``{n}`` in it becomes the number."""
        return (self.message or "").replace("{n}", str(n))


TOPICLESS = frozenset({"topics"})
"""Actions that name no topic (a step may leave ``topic`` out)."""


def load_steps(path: Path, actions: tuple[str, ...], message_action: str | None) -> list[Step]:
    """Parse and check a scenario; ValueError names the step and what is wrong."""
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ValueError(f"{path}: {exc}".splitlines()[0]) from None
    raw_steps = doc.get("steps") if isinstance(doc, dict) else doc
    if not isinstance(raw_steps, list) or not raw_steps:
        raise ValueError(f"{path}: expected a non-empty list of steps (under 'steps:')")
    return [_step(i, raw, actions, message_action) for i, raw in enumerate(raw_steps, 1)]


def _step(number: int, raw: Any, actions: tuple[str, ...], message_action: str | None) -> Step:
    where = f"step {number}"
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: expected a mapping of {sorted(STEP_KEYS)}")
    if unknown := set(raw) - STEP_KEYS:
        raise ValueError(f"{where}: unknown key {sorted(unknown)[0]!r}")
    action = raw.get("action") or (message_action if "message" in raw else None)
    if action not in actions:
        raise ValueError(f"{where}: action must be one of {', '.join(actions)}, got {action!r}")
    if action == message_action and not isinstance(raw.get("message"), str | int | float):
        raise ValueError(f"{where}: {action} needs a message")
    if action in TOPICLESS and "topic" not in raw:
        raw = {**raw, "topic": ""}  # it names no topic (the subscriber's topics)
    else:
        try:
            check_name("topic", raw.get("topic"))
        except Exception:
            raise ValueError(f"{where}: topic must be 1-128 characters of [A-Za-z0-9._-]") from None
    repeat = raw.get("repeat", 1)
    if type(repeat) is not int or repeat < 1:
        raise ValueError(f"{where}: repeat must be a whole number >= 1")
    sleeps = [raw.get(k, 0) for k in ("sleep_between", "sleep_after")]
    if any(type(v) not in (int, float) or not 0 <= v < float("inf") for v in sleeps):
        raise ValueError(f"{where}: sleep_between and sleep_after are seconds >= 0")
    message = None if raw.get("message") is None else str(raw["message"])
    return Step(number, raw["topic"], action, message, repeat, *map(float, sleeps))


class ScenarioRunner:
    """Runs steps unit by unit, saving progress after each one."""

    def __init__(
        self,
        path: Path,
        steps: list[Step],
        state: StateFile,
        stop: threading.Event,
        restart: bool = False,
    ) -> None:
        """``restart``: ignore the progress an earlier run saved (run every unit again)."""
        self.steps = steps
        self._path = path
        self._state = state
        self._stop = stop
        self._restart = restart
        self._key = str(path.resolve())
        self._digest = hashlib.sha256(path.read_bytes()).hexdigest()
        self.skipped = 0
        """Units an earlier run completed, skipped by :meth:`run`."""

    @property
    def units(self) -> int:
        """Every repetition of every step."""
        return sum(step.repeat for step in self.steps)

    @property
    def key(self) -> str:
        """Identifies this scenario file and content (units are keyed under it)."""
        return f"{self._key}@{self._digest[:12]}"

    def _done(self) -> int:
        scripts = self._state.section(self._state.load(), "scripts")
        entry = self._state.section(scripts, self._key)
        if entry.get("digest") != self._digest:
            return 0
        done = entry.get("done", 0)
        if type(done) is not int or done < 0:
            raise self._state.malformed(f"the progress of {self._key} is not a count >= 0")
        return done

    def _save(self, done: int) -> None:
        data = self._state.load()
        scripts = self._state.section(data, "scripts")
        scripts[self._key] = {"digest": self._digest, "done": done}
        data["scripts"] = scripts
        self._state.save(data)

    def run(self, execute: Callable[[Step, int], None]) -> int:
        """Execute every unit not done yet; returns how many ran. Stops early (and can be
        resumed) when the stop event is set."""
        done = 0 if self._restart else self._done()
        self.skipped = done
        if done:
            log.info("resuming after %d completed units", done)
        unit = ran = 0
        for step in self.steps:
            for n in range(1, step.repeat + 1):
                unit += 1
                if unit <= done:
                    continue
                if self._stop.is_set():
                    return ran
                execute(step, n)
                ran += 1
                self._save(unit)
                pause = step.sleep_between_s if n < step.repeat else step.sleep_after_s
                if pause and self._stop.wait(pause):
                    return ran
        return ran

    def summary(self, ran: int) -> str:
        """The line a client prints after :meth:`run`: how many units ran and, when some
        were skipped, that an earlier run had completed them (and how to run them again)."""
        line = f"script {self._path}: {ran} steps run"
        if self._stop.is_set():
            return line + " (stopped)"
        if self.skipped and self.skipped >= self.units:
            return (
                f"{line}: all {self.units} were completed by an earlier run of this file "
                f"(progress in {self._state.path}); --restart runs them again"
            )
        if self.skipped:
            return f"{line} (resumed after {self.skipped} completed by an earlier run)"
        return line
