"""The Publisher library without a broker: default spread, persisted ids, the warning for
a batch of nothing but duplicates, and wait's polling (a fake remote and a fake clock)."""

from __future__ import annotations

import gc
import logging
import weakref
from collections import Counter
from pathlib import Path
from typing import Any

import msgpack
import pytest

from channel_client import remote
from channel_client.statefile import STATE_DIR_ENV
from channel_server.errors import InvalidArgument, InvalidEvent, ProcessingTimeout, StoreError
from publisher import client
from publisher.client import DEFAULT_PARTITIONS, RESERVE_AHEAD, Publisher
from publisher.state import PublisherState


class FakeRemote:
    """What Publisher asks the channel; answers are set per test."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.outstanding: list[dict[str, int]] = []
        self.known: set[str] = set()
        self.retries = 0
        self.older = False
        """Whether it plays a broker older than packed batches (it takes lists only)."""

    def call(self, method: str, *args: Any) -> Any:
        self.calls.append((method, args))
        if method == "publish":
            (packed,) = args
            if self.older and type(packed) is bytes:  # as a broker before packed batches
                raise InvalidEvent("batch", "must be a list of events, got bytes")
            events = packed if self.older else msgpack.unpackb(packed)  # sent packed
            dupes = [ev["id"] for ev in events if ev["id"] in self.known]
            self.known.update(ev["id"] for ev in events)
            accepted = len(events) - len(dupes)
            return {"accepted": accepted, "duplicates": dupes, "refused": 0, "unrouted": 0}
        if method == "outstanding":
            return self.outstanding.pop(0)
        return None

    def claim(self) -> None:
        """No proxy to hand to the calling thread."""

    def release(self) -> None:
        self.calls.append(("release", ()))


class FakeClock:
    """time.monotonic and time.sleep of channel_client.remote: sleeping advances it."""

    def __init__(self) -> None:
        self.now = 100.0
        self.pauses: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.pauses.append(seconds)
        self.now += seconds


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeRemote:
    """Publishers made in the test talk to one shared FakeRemote (one channel)."""
    channel = FakeRemote()
    monkeypatch.setattr(client, "RemoteChannel", lambda *a, **kw: channel)
    return channel


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake_clock = FakeClock()
    monkeypatch.setattr(remote, "time", fake_clock)
    return fake_clock


def counts(outstanding: int = 0, in_flight: int = 0, dead: int = 0) -> dict[str, int]:
    return {
        "outstanding": outstanding,
        "queued": outstanding - in_flight,
        "in_flight": in_flight,
        "dead_letters": dead,
    }


# -- the default spread -------------------------------------------------------------------
def test_events_without_a_partition_go_round_robin(fake: FakeRemote, tmp_path: Path) -> None:
    pub = Publisher("c", "P", state_dir=tmp_path)
    events = [pub.event(n) for n in range(4 * DEFAULT_PARTITIONS)]
    assert [ev["partition"] for ev in events[:3]] == [1, 2, 3]  # seq % 16, seq from 1
    assert set(Counter(ev["partition"] for ev in events).values()) == {4}
    assert pub.event("ordered", partition="eu")["partition"] == "eu"
    assert pub.event("ordered", partition=0)["partition"] == 0


def test_partitions_is_settable_and_checked(fake: FakeRemote, tmp_path: Path) -> None:
    three = Publisher("c", "P", partitions=3, state_dir=None)
    assert [three.event()["partition"] for _ in range(4)] == [1, 2, 0, 1]
    for bad in (0, -1, 2.0, "4", True):
        with pytest.raises(InvalidArgument, match="partitions"):
            Publisher("c", "P", partitions=bad, state_dir=None)


# -- ids across runs -----------------------------------------------------------------------
def test_a_second_run_goes_on_with_new_ids(fake: FakeRemote, tmp_path: Path) -> None:
    with Publisher("c", "P", state_dir=tmp_path) as first:
        assert first.publish([first.event(n) for n in range(3)])["accepted"] == 3
    again = Publisher("c", "P", state_dir=tmp_path)
    summary = again.publish([again.event(n) for n in range(3)])
    assert summary == {"accepted": 3, "duplicates": [], "refused": 0, "unrouted": 0}
    assert sorted(fake.known) == [f"P-{n}" for n in range(1, 7)]
    assert again.state_file == tmp_path / "publisher-P.json"


def test_the_default_state_dir_is_the_clis(
    fake: FakeRemote, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(STATE_DIR_ENV, str(tmp_path / "env"))
    with Publisher("c", "P") as pub:
        pub.publish([pub.event()])
    assert pub.state_file == tmp_path / "env" / "publisher-P.json"
    assert Publisher("c", "P").event()["id"] == "P-2"


def test_no_state_dir_keeps_nothing_and_starts_at_one(
    fake: FakeRemote, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(STATE_DIR_ENV, str(tmp_path))
    pub = Publisher("c", "P", state_dir=None)
    pub.publish([pub.event()])
    assert pub.state_file is None
    assert list(tmp_path.iterdir()) == []
    assert Publisher("c", "P", state_dir=None).event()["id"] == "P-1"


def test_an_earlier_start_never_lowers_the_stored_sequence(
    fake: FakeRemote, tmp_path: Path
) -> None:
    with Publisher("c", "P", state_dir=tmp_path, next_seq=50) as ahead:
        ahead.publish([ahead.event()])
    with Publisher("c", "P", state_dir=tmp_path, next_seq=1) as behind:
        behind.publish([behind.event()])
    assert Publisher("c", "P", state_dir=tmp_path).event()["id"] == "P-51"


def test_ids_are_reserved_ahead_so_the_state_file_is_written_once_per_block(
    fake: FakeRemote, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    writes: list[int] = []
    reserve = PublisherState.reserve

    def counted(self: PublisherState, channel: str, next_seq: int) -> int:
        writes.append(next_seq)
        return reserve(self, channel, next_seq)

    monkeypatch.setattr(PublisherState, "reserve", counted)
    with Publisher("c", "P", state_dir=tmp_path) as pub:
        for _ in range(RESERVE_AHEAD + 5):  # one event per publish
            pub.publish([pub.event()])
    assert writes == [2 + RESERVE_AHEAD, 3 + 2 * RESERVE_AHEAD]
    assert Publisher("c", "P", state_dir=tmp_path).event()["id"] == f"P-{RESERVE_AHEAD + 6}"


def test_a_run_that_dies_without_closing_skips_ids_and_reuses_none(
    fake: FakeRemote, tmp_path: Path
) -> None:
    died: Publisher | None = Publisher("c", "P", state_dir=tmp_path)
    assert died is not None
    died.publish([died.event(n) for n in range(3)])  # and no close: killed
    died = None  # (its process gone: not an open Publisher of this one any more)
    gc.collect()
    again = Publisher("c", "P", state_dir=tmp_path)
    assert again.event()["id"] == f"P-{4 + RESERVE_AHEAD}"


def test_a_close_that_cannot_write_its_state_still_lets_the_connection_go(
    fake: FakeRemote,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The ids reserved and not used cannot be given back (a full disk): that costs only a
    gap in the ids, so it is logged; raising it from close (a with block's exit) hid
    what the block did (session 35's storage probe)."""
    pub = Publisher("c", "P", state_dir=tmp_path)
    pub.publish([pub.event()])

    def broken(*_: object) -> None:
        raise StoreError("state file", "disk full")

    monkeypatch.setattr(PublisherState, "release", broken)
    pub.close()
    assert fake.calls[-1] == ("release", ())
    assert "stay reserved (store state file: disk full)" in caplog.text


def test_a_closed_publisher_publishes_nothing_and_says_so(fake: FakeRemote, tmp_path: Path) -> None:
    """As a closed file: its sequence was given back, so publishing on would reuse ids."""
    pub = Publisher("c", "P", state_dir=tmp_path)
    pub.publish([pub.event()])
    pub.close()
    sent = list(fake.calls)
    with pytest.raises(ValueError, match="publisher P of c is closed"):
        pub.publish([pub.event()])
    with pytest.raises(ValueError, match="is closed"):
        pub.wait(timeout_s=1.0)
    pub.close()  # a second close does nothing
    assert fake.calls == sent


def in_another_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """What comes next acts as another process would: its own open Publishers (the
    refusal of a second one sharing a sequence is per process)."""
    monkeypatch.setattr(client, "_LIVE", weakref.WeakSet())


def test_a_close_gives_back_only_its_own_reservation(
    fake: FakeRemote, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two runs of one publisher id at once (two processes): the first to close must not
    hand the second's reserved numbers to a third."""
    first = Publisher("c", "P", state_dir=tmp_path)
    first.publish([first.event()])  # P-1, reserves up to 2 + RESERVE_AHEAD
    in_another_process(monkeypatch)
    second = Publisher("c", "P", state_dir=tmp_path)
    second.publish([second.event()])  # P-(2 + RESERVE_AHEAD), reserves a block more
    first.close()
    in_another_process(monkeypatch)
    third = Publisher("c", "P", state_dir=tmp_path)
    assert third.event()["id"] == f"P-{3 + 2 * RESERVE_AHEAD}"
    second.close()  # gives back down to its own next id, never below the first's block
    in_another_process(monkeypatch)
    assert Publisher("c", "P", state_dir=tmp_path).event()["id"] == f"P-{3 + RESERVE_AHEAD}"


def test_a_second_open_publisher_of_one_sequence_in_a_process_is_refused(
    fake: FakeRemote, tmp_path: Path
) -> None:
    """Both numbered events from the one state file: the channel kept one of each, and
    only a warning said so (session 34's newcomer: 8 of one id, 7 of 8 events dropped)."""
    first = Publisher("c", "P", state_dir=tmp_path)
    with pytest.raises(InvalidArgument, match="P is open already in this process on c"):
        Publisher("c", "P", state_dir=tmp_path)
    Publisher("other", "P", state_dir=tmp_path).close()  # another channel: its own sequence
    Publisher("c", "P", state_dir=None).close()  # a sequence in memory: the caller's choice
    first.close()
    Publisher("c", "P", state_dir=tmp_path).close()  # closed: free again


def test_a_batch_of_only_duplicates_says_why_once(
    fake: FakeRemote, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    first = Publisher("c", "P", state_dir=None)
    first.publish([first.event(n) for n in range(3)])
    rerun = Publisher("c", "P", state_dir=None)  # a re-run that kept no state
    with caplog.at_level(logging.WARNING, logger="publisher"):
        summary = rerun.publish([rerun.event(n) for n in range(3)])
        rerun.publish([rerun.event(n) for n in range(1)])  # P-4: new, no warning
        rerun.publish([dict(rerun.event(), id="P-1")])
    assert summary["accepted"] == 0
    assert summary["duplicates"] == ["P-1", "P-2", "P-3"]
    assert summary["warning"].startswith("all 3 events were published to c before (P-1 ... P-3)")
    assert "state_dir=None" in summary["warning"]
    assert "kept in memory only" in summary["warning"]
    assert "another process publishes as at the same time" in summary["warning"]
    assert [r.getMessage() for r in caplog.records] == [summary["warning"]]  # once


def test_an_empty_batch_is_not_a_batch_of_duplicates(fake: FakeRemote) -> None:
    assert "warning" not in Publisher("c", "P", state_dir=None).publish([])


# -- wait --------------------------------------------------------------------------------
def test_wait_returns_once_nothing_is_outstanding(fake: FakeRemote, clock: FakeClock) -> None:
    fake.outstanding = [counts(5, 2), counts(5, 2), counts(1, 1), counts(0)]
    pub = Publisher("c", "P", state_dir=None)
    assert pub.wait(timeout_s=10) == counts(0)
    assert [args for method, args in fake.calls if method == "outstanding"] == [("P",)] * 4
    assert clock.pauses == [0.02, 0.04, 0.08]  # doubling from 20 ms: no busy loop


def test_wait_pauses_grow_to_half_a_second(fake: FakeRemote, clock: FakeClock) -> None:
    fake.outstanding = [counts(1, 1)] * 12 + [counts(0)]
    Publisher("c", "P", state_dir=None).wait(timeout_s=60)
    assert clock.pauses[-3:] == [0.5, 0.5, 0.5]


def test_wait_reports_dead_letters(
    fake: FakeRemote, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    fake.outstanding = [counts(0, dead=2)]
    with caplog.at_level(logging.WARNING, logger="publisher"):
        assert Publisher("c", "P", state_dir=None).wait(timeout_s=1)["dead_letters"] == 2
    assert "2 events of publisher P are in c's dead-letter queue" in caplog.text


def test_wait_times_out_with_what_is_left(fake: FakeRemote, clock: FakeClock) -> None:
    fake.outstanding = [counts(7, 2, dead=1)] * 20
    with pytest.raises(ProcessingTimeout) as info:
        Publisher("c", "P", state_dir=None).wait(timeout_s=1.0)
    err = info.value
    assert isinstance(err, TimeoutError)
    assert (err.outstanding, err.queued, err.in_flight, err.dead_letters) == (7, 5, 2, 1)
    assert sum(clock.pauses) == pytest.approx(1.0)  # up to the deadline, not past it
    assert "7 events of publisher 'P' on 'c' not processed after 1 s" in str(err)


def test_an_older_broker_gets_plain_batches_after_refusing_the_first_packed_one(
    fake: FakeRemote,
) -> None:
    """A broker older than packed batches refuses one as not a list: the Publisher sends
    that batch again as the list, and every later one, from publish and submit alike."""
    fake.older = True
    with Publisher("c", "P", state_dir=None) as pub:
        assert pub.publish([pub.event(n) for n in range(3)])["accepted"] == 3
        assert pub.publish([pub.event(n) for n in range(2)])["accepted"] == 2
        assert pub.submit([pub.event(9)]).result(timeout=10)["accepted"] == 1
    sent = [args[0] for method, args in fake.calls if method == "publish"]
    assert [type(batch).__name__ for batch in sent] == ["bytes", "list", "list", "list"]
    assert len(fake.known) == 6


def test_a_batch_refused_for_its_own_fault_is_not_sent_again_plain(fake: FakeRemote) -> None:
    """Only the older broker's "got bytes" turns a Publisher to plain lists."""

    def refuse(method: str, *args: Any) -> Any:
        fake.calls.append((method, args))
        raise InvalidEvent("payload", "something the broker refuses", 0)

    with Publisher("c", "P", state_dir=None) as pub:
        fake.call = refuse  # type: ignore[method-assign]
        with pytest.raises(InvalidEvent, match="something the broker refuses"):
            pub.publish([pub.event(1)])
    assert [type(args[0]).__name__ for method, args in fake.calls if method == "publish"] == [
        "bytes"
    ]


# -- the channel's id scope (what a plan of a batch file must call a duplicate) -------------
@pytest.mark.parametrize(
    ("stats", "asked", "scope"),
    [
        ({"ids": "channel"}, None, "channel"),  # the channel says, whatever was asked
        ({"ids": "publisher"}, "channel", "publisher"),
        ({}, "channel", "channel"),  # a broker that does not say: what this one asked for
        ({}, None, "publisher"),  # else the narrower dedupe, never a silent drop
    ],
)
def test_the_channel_id_scope_is_the_channels_own(
    fake: FakeRemote, stats: dict[str, str], asked: str | None, scope: str
) -> None:
    def answer(method: str, *args: Any) -> Any:
        return stats if method == "stats" else None

    fake.call = answer  # type: ignore[method-assign]
    with Publisher("c", "P", state_dir=None, id_scope=asked) as pub:
        assert pub.channel_id_scope() == scope


def test_retries_count_the_submit_sender_s_own_too(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``publish --submit --json`` said 'retries': 0 after its sender retried six times
    (session 36's network probe): only the caller's connection was counted."""
    made: list[FakeRemote] = []

    def connection(*args: Any, **kwargs: Any) -> FakeRemote:
        made.append(FakeRemote())
        return made[-1]

    monkeypatch.setattr(client, "RemoteChannel", connection)
    pub = Publisher("c", "P", state_dir=None)
    pub.submit([pub.event(1)]).result(timeout=10)
    own, sender = made
    own.retries, sender.retries = 1, 3
    assert pub.retries == 4
    pub.close()
    assert pub.retries == 4  # still counted once its sender ended
