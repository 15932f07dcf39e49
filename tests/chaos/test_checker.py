"""The chaos checker on small synthetic histories: each rule, and its edges."""

from __future__ import annotations

from typing import Any

from tests.chaos.checker import Report, check, declared_dead_events, refused_again

PARTITIONS = 2


def rec(event_id: str, sub: str = "s1", pid: int = 100, at: float = 0.0) -> dict[str, Any]:
    pub, _, seq = event_id.rpartition("-")
    return {
        "id": event_id,
        "publisher_id": pub,
        "partition": int(seq) % PARTITIONS,
        "timestamp": at,
        "attempt": 1,
        "subscriber": sub,
        "pid": pid,
        "at": at,
    }


def kill(sub: str, pid: int, at: float, kind: str = "sub-kill", **extra: Any) -> dict[str, Any]:
    return {"kind": kind, "target": sub, "pid": pid, "start": at, "end": at + 1.0, **extra}


def run(
    records: list[dict[str, Any]],
    faults: list[dict[str, Any]] = (),
    declared: list[tuple[float, str]] = (),
    count: int = 4,
    prefetch: int = 10,
) -> Report:
    published = {"P": [f"P-{n}" for n in range(1, count + 1)]}
    return check(published, records, faults, declared, prefetch)


def in_order(count: int = 4) -> list[dict[str, Any]]:
    return [rec(f"P-{n}", at=float(n)) for n in range(1, count + 1)]


def test_a_clean_history_passes() -> None:
    report = run(in_order())
    assert report.ok
    assert (report.totals.events, report.totals.records, report.totals.duplicates) == (4, 4, 0)


def test_an_event_never_recorded_is_lost() -> None:
    report = run(in_order()[:3])
    assert report.lost == ["P-4"]
    assert not report.ok


def test_a_record_nobody_published_is_unexpected() -> None:
    report = run([*in_order(), rec("P-9", at=9.0), rec("Q-1", at=9.5)])
    assert report.unexpected == ["P-9", "Q-1"]
    assert not report.ok


def test_order_is_per_partition_and_by_first_record() -> None:
    records = [rec("P-3", at=1.0), rec("P-2", at=2.0), rec("P-1", at=3.0), rec("P-4", at=4.0)]
    report = run(records)
    # partition 1: P-3 before P-1 is a violation; partition 0: P-2 then P-4 is fine
    assert [(v.partition, v.earlier, v.later) for v in report.order_violations] == [
        (1, "P-3", "P-1")
    ]


def test_a_late_duplicate_does_not_count_as_reordering() -> None:
    records = [*in_order(), rec("P-1", sub="s2", pid=200, at=9.0)]
    report = run(records, [kill("s1", 100, 4.5)])
    assert report.order_violations == []
    assert report.unexplained == []


def test_a_duplicate_after_a_sigkill_of_its_process_is_explained() -> None:
    records = [*in_order(), rec("P-4", sub="s2", pid=200, at=6.0)]
    report = run(records, [kill("s1", 100, 5.0)])
    assert [d.id for d in report.duplicates] == ["P-4"]
    assert "sub-kill of s1 (pid 100)" in report.duplicates[0].explanation
    assert report.ok


def test_a_duplicate_without_a_death_is_unexplained() -> None:
    report = run([*in_order(), rec("P-4", sub="s2", pid=200, at=6.0)])
    assert [d.id for d in report.unexplained] == ["P-4"]
    assert "no death of s1 (pid 100)" in report.unexplained[0].why_not
    assert not report.ok


def test_a_redelivery_by_a_subscriber_declared_dead_before_is_named() -> None:
    records = [*in_order(), rec("P-4", sub="s2", pid=200, at=6.0)]
    report = run(records, declared=[(3.5, "s2")])  # s2 woke up and handled a stale push
    assert report.unexplained[0].why_not.endswith("(s2 had been declared dead at 3.500 before it)")


def test_the_death_must_hit_that_process_between_the_two_records() -> None:
    records = [*in_order(), rec("P-4", sub="s2", pid=200, at=6.0)]
    assert run(records, [kill("s1", 101, 5.0)]).unexplained  # another incarnation of s1
    assert run(records, [kill("s2", 100, 5.0)]).unexplained  # another subscriber
    assert run(records, [kill("s1", 100, 3.0)]).unexplained  # before the first record
    assert run(records, [kill("s1", 100, 7.0)]).unexplained  # after the redelivery
    assert not run(records, [kill("s1", 100, 3.97)]).unexplained  # within clock tolerance


def test_a_graceful_sigterm_explains_nothing() -> None:
    records = [*in_order(), rec("P-4", sub="s2", pid=200, at=6.0)]
    assert run(records, [kill("s1", 100, 5.0, kind="sub-term")]).unexplained


def test_crash_after_explains_only_when_it_exited_with_137() -> None:
    records = [*in_order(), rec("P-4", sub="s2", pid=200, at=6.0)]
    crashed = kill("s1", 100, 2.0, kind="crash-after", exit_code=137)  # exit seen at 3.0+1
    crashed["end"] = 5.0
    assert run(records, [crashed]).ok
    assert run(records, [dict(crashed, exit_code=0)]).unexplained


def test_a_declared_death_explains_with_the_log_lag_allowed() -> None:
    records = [*in_order(), rec("P-4", sub="s2", pid=200, at=6.0)]
    assert run(records, declared=[(5.0, "s1")]).ok
    assert run(records, declared=[(6.2, "s1")]).ok  # arrival stamp a little after
    assert run(records, declared=[(7.0, "s1")]).unexplained
    assert run(records, declared=[(5.0, "s2")]).unexplained


def test_one_death_explains_at_most_one_prefetch_of_duplicates() -> None:
    records = [*in_order(), *(rec(f"P-{n}", sub="s2", pid=200, at=10.0 + n) for n in (2, 3, 4))]
    faults = [kill("s1", 100, 5.0)]
    assert run(records, faults, prefetch=3).ok
    report = run(records, faults, prefetch=2)
    # the earliest processed of the three is the one beyond the prefetch
    assert [d.id for d in report.unexplained] == ["P-2"]
    assert "beyond the prefetch (2)" in report.unexplained[0].why_not
    assert len(report.duplicates) == 3


def test_separate_deaths_each_get_their_own_prefetch() -> None:
    records = [rec("P-1", at=1.0), rec("P-2", "s2", 200, 2.0)]
    records += [rec("P-3", at=3.0), rec("P-4", "s2", 200, 4.0)]
    records += [rec("P-3", "s3", 300, 6.0), rec("P-4", "s3", 300, 7.0)]
    report = run(records, [kill("s1", 100, 5.0)], declared=[(5.0, "s2")], prefetch=1)
    assert report.ok
    assert [d.explanation for d in report.duplicates] == [
        "sub-kill of s1 (pid 100) at 5.000",
        "declared-dead of s2 at 5.000",
    ]


def test_every_further_delivery_needs_its_own_cause() -> None:
    records = [*in_order(), rec("P-4", "s2", 200, 6.0), rec("P-4", "s3", 300, 8.0)]
    assert run(records, [kill("s1", 100, 5.0)]).unexplained
    assert run(records, [kill("s1", 100, 5.0), kill("s2", 200, 7.0)]).ok


def test_totals_count_faults_that_fired() -> None:
    faults = [
        kill("s1", 100, 1.0),
        kill("s2", 200, 1.0, kind="sub-stop"),
        kill("s3", 300, 1.0, kind="crash-after", fired=False, exit_code=0),
    ]
    assert run(in_order(), faults).totals.faults == {"sub-kill": 1, "sub-stop": 1}


def test_declared_dead_lines_in_all_three_wordings() -> None:
    lines = [
        (
            1.0,
            "2025-01-01 10:00:00,000 WARNING channel_server.channel: chaos: push of 10 "
            "events to s2 failed: CommunicationError: timeout; member marked inactive",
        ),
        (2.0, "chaos: push of 3 events to s1 failed: connection refused"),  # not yet dead
        (
            3.0,
            "chaos: s3 left 3 of 10 events unacknowledged; they will be redelivered; "
            "member marked inactive",
        ),
        (4.0, "chaos: s3 left 1 of 10 events unacknowledged; they will be redelivered"),
        (5.0, "WARNING chaos: s1 marked inactive (3 failed pushes)"),
        (6.0, "other: s1 marked inactive (3 failed pushes)"),  # another channel
        (7.0, "xchaos: s1 marked inactive (3 failed pushes)"),
    ]
    assert declared_dead_events(lines, "chaos") == [(1.0, "s2"), (3.0, "s3"), (5.0, "s1")]


def test_a_zombie_finishing_what_it_held_after_a_freeze_is_explained() -> None:
    # s1 froze holding P-4 (5.0-9.0); declared dead at 7.0, P-4 went to s2 (7.5); thawed,
    # s1 finished P-4 at 9.2: a later record than s2's, by the subscriber declared dead.
    records = [*in_order(3), rec("P-4", sub="s2", pid=200, at=7.5), rec("P-4", at=9.2)]
    stop = kill("s1", 100, 5.0, kind="sub-stop") | {"end": 9.0}
    report = run(records, [stop], declared=[(7.0, "s1")])
    assert report.unexplained == []
    assert report.duplicates[0].explanation.startswith("declared-dead of s1")


def test_a_late_record_long_after_the_zombie_ran_again_is_unexplained() -> None:
    records = [*in_order(3), rec("P-4", sub="s2", pid=200, at=7.5), rec("P-4", at=20.0)]
    stop = kill("s1", 100, 5.0, kind="sub-stop") | {"end": 9.0}
    report = run(records, [stop], declared=[(7.0, "s1")])
    assert [d.id for d in report.unexplained] == ["P-4"]


def test_a_death_during_a_broker_outage_explains_everything_processed_before_it() -> None:
    """README Guarantees: acks the dead broker never stored, and a subscriber that dies
    before it can send them again: all it processed comes back, beyond one prefetch."""
    records = [*in_order(), *(rec(f"P-{n}", sub="s2", pid=200, at=10.0 + n) for n in (2, 3, 4))]
    outage = {"kind": "broker-kill", "target": "broker", "pid": 1, "start": 4.5, "end": 6.0}
    during = [outage, kill("s1", 100, 5.0)]
    assert run(records, during, prefetch=2).ok
    after = [outage, kill("s1", 100, 6.0 + 2.5)]  # it had time to send its acks again
    assert [d.id for d in run(records, after, prefetch=2).unexplained] == ["P-2"]


def test_a_session_refused_again_is_a_live_broker_pushing_in_an_older_session() -> None:
    late = "WARNING subscriber.client: refused a push: session 17 is older than 20"
    again = "WARNING subscriber.client: refused a push: session 18 is older than 20"
    assert refused_again([late, "something else", again]) == []  # each once: late pushes
    assert refused_again([late, again, again, again]) == ["18"]


def test_a_takeover_explains_what_the_new_process_handles_again() -> None:
    """s1 (pid 100) handled P-2, froze with its ack not sent, and a new s1 (pid 200) took
    the id over and got P-2 again: explained by the takeover, as by a death."""
    takeover = kill("s1", 100, 2.5, kind="sub-takeover")
    history = [*in_order(), rec("P-2", pid=200, at=3.0)]
    assert run(history, [takeover]).ok
    assert not run(history).ok  # the same without the takeover


def test_a_thawed_zombie_may_finish_only_the_event_in_hand_at_once() -> None:
    """After the thaw (the takeover's end, 3.5) the old process finished what it held
    within the zombie window: explained; one it handled long after is not."""
    takeover = kill("s1", 100, 2.5, kind="sub-takeover")  # frozen 2.5 to 3.5
    before = [rec("P-1", at=1.0), rec("P-2", at=2.0)]
    new = [rec("P-3", pid=200, at=3.0), rec("P-4", pid=200, at=3.2)]
    assert run([*before, *new, rec("P-3", pid=100, at=3.6)], [takeover]).ok
    assert not run([*before, *new, rec("P-4", pid=100, at=9.0)], [takeover]).ok
