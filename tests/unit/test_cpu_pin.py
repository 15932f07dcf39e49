"""serve --cpu: which CPU ``auto`` picks (fake samples of /proc/stat), and what each choice
does to a process (a child interpreter: pinning this one would slow the rest of the run)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

import pytest

from channel_server.cpu_pin import cpu_choice, idlest
from channel_server.machine_cpu import per_cpu

STAT = """cpu  300 0 100 900 0 0 0 0 0 0
cpu0 100 0 50 300 0 0 0 0 0 0
cpu1 200 0 50 600 0 0 0 0 0 0
intr 12345
"""


def test_each_cpus_busy_and_total_times_are_read() -> None:
    assert per_cpu(STAT) == {0: (150, 450), 1: (250, 850)}
    assert per_cpu("cpu0 x y z\ncpu 1 2 3 4 5\n") == {}  # unreadable lines are left out


def test_auto_picks_the_cpu_idle_longest_between_the_samples() -> None:
    before = {0: (100, 1000), 1: (100, 1000), 2: (100, 1000)}
    after = {0: (190, 1100), 1: (110, 1100), 2: (150, 1100)}  # idle 10, 90, 50
    assert idlest(before, after, [0, 1, 2]) == 1
    assert idlest(before, after, [0, 2]) == 2  # only the CPUs it may use


def test_ties_go_away_from_cpu_0_and_unsampled_cpus_count_as_busy() -> None:
    same = {0: (0, 100), 1: (0, 100)}
    assert idlest(same, same, [0, 1]) == 1  # no time passed: nothing to tell them apart
    assert idlest({}, {}, [3, 5]) == 5
    assert idlest({0: (0, 100)}, {0: (0, 200)}, [0, 1]) == 0  # CPU 1 not in the samples


def test_brokers_starting_together_on_a_quiet_machine_spread_by_process_id() -> None:
    before = {0: (0, 0), 1: (0, 0), 2: (0, 0)}
    after = {0: (5, 100), 1: (2, 100), 2: (60, 100)}  # idle 95, 98, 40
    picks = {idlest(before, after, [0, 1, 2], spread=pid) for pid in (4100, 4101)}
    assert picks == {0, 1}  # about as idle as each other; the busy CPU 2 never
    assert idlest(before, after, [0, 1, 2], spread=4100) == 1  # the idlest first


@pytest.mark.parametrize("text", ["auto", "all", "0", "17"])
def test_a_cpu_choice_is_auto_all_or_a_number(text: str) -> None:
    assert cpu_choice(text) == text


@pytest.mark.parametrize("text", ["", "-1", "one", "0,1", "1.5"])
def test_anything_else_is_refused(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="auto, all or a CPU number"):
        cpu_choice(text)


PROBE = """
import os, sys, threading
from channel_server import cpu_pin
early = threading.Thread(target=threading.Event().wait, args=(5,), daemon=True)
early.start()  # a thread started before pinning
said = cpu_pin.pin(sys.argv[1])
late = []
after = threading.Thread(target=lambda: late.append(sorted(os.sched_getaffinity(0))))
after.start()
after.join(5)
print(said)
print(sorted(os.sched_getaffinity(0)), sorted(os.sched_getaffinity(early.native_id)), late[0])
"""


def probe(choice: str) -> tuple[str, str]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, choice], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    said, cpus = done.stdout.strip().splitlines()
    return said, cpus


def test_auto_pins_every_thread_of_the_process_to_one_cpu() -> None:
    allowed = sorted(os.sched_getaffinity(0))
    said, cpus = probe("auto")
    if len(allowed) < 2:  # nothing to choose from: left as it is
        assert said == "None"
        assert cpus == f"{allowed} {allowed} {allowed}"
        return
    cpu = int(said.split()[3])
    assert cpu in allowed
    assert cpus == f"[{cpu}] [{cpu}] [{cpu}]"  # itself, a thread from before, one from after
    assert said.endswith("(the idlest; --cpu all leaves the CPUs to the OS)")


def test_all_leaves_the_process_as_it_is_and_a_number_names_the_cpu() -> None:
    allowed = sorted(os.sched_getaffinity(0))
    assert probe("all") == ("None", f"{allowed} {allowed} {allowed}")
    said, cpus = probe(str(allowed[0]))
    assert cpus == f"[{allowed[0]}] [{allowed[0]}] [{allowed[0]}]"
    assert said.startswith(f"pinned to CPU {allowed[0]} of {allowed} (--cpu;")


def test_a_pinned_process_knows_its_cpu_and_a_loose_one_has_none() -> None:
    """What the broker's busy rule reads (MachineCpu's ``cpu``)."""
    allowed = sorted(os.sched_getaffinity(0))
    several = (os.cpu_count() or 1) > 1  # on a one-CPU machine nothing is pinned
    held = allowed[0] if len(allowed) == 1 and several else None  # held to one already
    code = "from channel_server import cpu_pin; cpu_pin.pin({!r}); print(cpu_pin.pinned_cpu())"
    for choice, expected in (("all", held), (str(allowed[-1]), allowed[-1] if several else None)):
        done = subprocess.run(
            [sys.executable, "-c", code.format(choice)], capture_output=True, text=True, timeout=30
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == str(expected)
