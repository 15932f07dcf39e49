"""A broker whose wall clock is stepped, as NTP, a VM restored from a snapshot or an
operator does: set back between two lives, or stepped while it runs. Its channels keep
their sessions growing and their deadlines and delivered window on a clock without steps
(``channel_server/steady_clock.py``), so no subscriber is left out and no duplicate gets in.

The broker is a real process; its wall clock reads off by the step (written to a file,
read again when it changes) from its first line of Python on
(``clock_shift/sitecustomize.py``), its monotonic clocks untouched.
"""

from __future__ import annotations

import signal

import pytest

from channel_server.errors import NotAuthorized
from tests.integration.conftest import publisher_for
from tests.integration.procs import Cluster, ShiftedClock


def test_a_broker_restarted_with_its_clock_set_back_reaches_a_subscriber_that_kept_running(
    cluster: Cluster,
) -> None:
    broker = cluster.broker("steps")
    cluster.subscriber("steps", "s1")
    with publisher_for(cluster, "steps") as pub:
        pub.publish([pub.event(i) for i in range(3)])
    cluster.wait_for_records("steps", ("s1",), 3)
    broker.popen.send_signal(signal.SIGKILL)
    broker.popen.wait(10)
    clock = ShiftedClock(cluster.tmp)
    clock.step(-120.0)  # within the 300 s a proof of the token may be off
    cluster.broker("steps", env=clock.env)
    with publisher_for(cluster, "steps", next_seq=4) as pub:
        pub.publish([pub.event(i) for i in range(3, 6)])
    got = cluster.wait_for_records("steps", ("s1",), 6, timeout_s=30)
    assert len(got["s1"]) == 6


def test_a_clock_stepped_forward_does_not_make_the_window_forget_ids(cluster: Cluster) -> None:
    clock = ShiftedClock(cluster.tmp)
    cluster.broker("steps", extra=("--dedupe-max-age", "60"), env=clock.env)
    cluster.subscriber("steps", "s1")
    with publisher_for(cluster, "steps") as pub:
        pub.publish([pub.event(0)])
        cluster.wait_for_records("steps", ("s1",), 1)
        clock.step(120.0)  # the broker's wall clock jumps two minutes on
        pub.publish([pub.event(1)])  # (the window expires what is too old as it adds)
    with publisher_for(cluster, "steps", next_seq=1) as pub:
        again = pub.publish([pub.event(0)])  # the first event's id, sent again
    assert again["accepted"] == 0
    assert again["duplicates"] == ["PUB-1"]


def test_a_client_whose_clock_is_far_off_the_brokers_is_told_so(cluster: Cluster) -> None:
    clock = ShiftedClock(cluster.tmp)
    clock.step(600.0)  # the broker's machine ten minutes ahead of this one
    broker = cluster.broker("steps", env=clock.env)
    with pytest.raises(NotAuthorized, match=r"made 600 s behind this daemon's clock .*differ"):
        publisher_for(cluster, "steps").publish([])
    broker.wait_for(r"refused a connection from .*: the proof was made 600 s behind")
