"""A scenario run again says what happened (issue 14, item 10): units an earlier run
completed are skipped and the summary says so, with where the progress is and how to run
them again (``--restart``); a resumed run says how many it skipped."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from channel_client.scenario import ScenarioRunner, load_steps
from channel_client.statefile import StateFile

SCENARIO = "steps:\n  - {topic: t, message: 'm {n}', repeat: 2}\n  - {topic: t, message: bye}\n"


def runner(tmp_path: Path, restart: bool = False, stop: threading.Event | None = None):
    path = tmp_path / "s.yaml"
    if not path.exists():
        path.write_text(SCENARIO)
    steps = load_steps(path, ("put",), "put")
    state = StateFile(tmp_path / "state" / "client.json")
    return ScenarioRunner(path, steps, state, stop or threading.Event(), restart), path


def test_a_rerun_of_a_completed_scenario_says_why_nothing_ran(tmp_path: Path) -> None:
    first, path = runner(tmp_path)
    done: list[str] = []
    assert first.run(lambda step, n: done.append(step.text(n))) == 3
    assert first.summary(3) == f"script {path}: 3 steps run"
    again, _ = runner(tmp_path)
    assert again.run(lambda step, n: done.append(step.text(n))) == 0
    assert again.summary(0) == (
        f"script {path}: 0 steps run: all 3 were completed by an earlier run of this file "
        f"(progress in {tmp_path / 'state' / 'client.json'}); --restart runs them again"
    )
    assert done == ["m 1", "m 2", "bye"]


def test_restart_runs_every_step_again(tmp_path: Path) -> None:
    first, _ = runner(tmp_path)
    first.run(lambda step, n: None)
    again, path = runner(tmp_path, restart=True)
    done: list[str] = []
    assert again.run(lambda step, n: done.append(step.text(n))) == 3
    assert done == ["m 1", "m 2", "bye"]
    assert again.summary(3) == f"script {path}: 3 steps run"


def test_a_resumed_run_says_how_many_it_skipped(tmp_path: Path) -> None:
    stop = threading.Event()
    first, path = runner(tmp_path, stop=stop)
    assert first.run(lambda step, n: stop.set()) == 1  # stopped after the first unit
    assert first.summary(1) == f"script {path}: 1 steps run (stopped)"
    again, _ = runner(tmp_path)
    assert again.run(lambda step, n: None) == 2
    assert (
        again.summary(2)
        == f"script {path}: 2 steps run (resumed after 1 completed by an earlier run)"
    )


def test_a_topics_step_names_no_topic(tmp_path: Path) -> None:
    """``{action: topics}`` was refused for want of a topic it does not use (session 33's
    operator probe); the other actions still need one."""
    path = tmp_path / "steps.yaml"
    path.write_text("- {action: subscribe, topic: news}\n- {action: topics}\n")
    steps = load_steps(path, ("subscribe", "topics"), None)
    assert [(s.action, s.topic) for s in steps] == [("subscribe", "news"), ("topics", "")]
    path.write_text("- {action: subscribe}\n")
    with pytest.raises(ValueError, match="step 1: topic must be"):
        load_steps(path, ("subscribe", "topics"), None)
