"""Hostile text from the outside, with real processes: names that would lead out of the
state directory, rich markup and terminal escapes in partitions and nack messages, and a
catastrophic regex sent to the name server (embedded and standalone)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from channel_server.errors import NotAuthorized
from channel_server.wire import NS_CHANNEL_PREFIX, locate_ns
from tests.integration.conftest import channel_stats, publisher_for
from tests.integration.procs import PROJECT_ROOT, Cluster, wait_until

pytestmark = pytest.mark.integration
POISON_ID = "[/oops]\x1b[31m-1"
"""Closes a tag that was never opened (rich's MarkupError) and turns a terminal red."""
SHOWN_POISON_ID = "[/oops]\\x1b[31m-1"
MARKUP_PARTITION = "[/oops]"
EVIL_NAME = "a" * 26 + "-"
"""``(a+)+$`` backtracks 2**26 times on this name before it fails to match."""
HOSTILE_REGEX = r"pubsub\.channel\.(a+)+$"
REFUSAL_BUDGET_S = 1.0


def every_path(root: Path) -> list[Path]:
    return sorted(root.rglob("*"))


@pytest.mark.parametrize(
    ("flag", "value"), [("--group", "../../../x"), ("--channel", "../../x"), ("--id", "../x")]
)
def test_a_name_out_of_the_state_dir_is_refused_before_any_file_is_written(
    tmp_path: Path, flag: str, value: str
) -> None:
    state = tmp_path / "a" / "b" / "c" / "sd"
    names = {"--channel": "c", "--id": "s1", "--group": "g", flag: value}
    argv = ["-m", "subscriber", "run", *(x for item in names.items() for x in item)]
    argv += ["--state-dir", str(state), "--record", str(tmp_path / "r.jsonl"), "--ns-port", "1"]
    before = every_path(tmp_path)

    result = subprocess.run(
        [sys.executable, *argv], capture_output=True, text=True, timeout=60, cwd=PROJECT_ROOT
    )

    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"python -m subscriber run: error: argument {flag}: {value!r}: must be 1-128 "
        "characters of [A-Za-z0-9._-] (see --help)"
    ]
    assert every_path(tmp_path) == before  # no state dir, no window, no record


def test_an_id_with_a_space_does_not_mark_another_processed_after_a_restart(
    cluster: Cluster,
) -> None:
    cluster.broker("ev")
    state = ["--state-dir", str(cluster.tmp / "sub-state")]
    first = cluster.subscriber("ev", "s1", *state)
    with publisher_for(cluster, "ev", "EVIL") as pub:
        assert pub.publish([dict(pub.event("x"), id="evil PUB-7")])["accepted"] == 1
    cluster.wait_for_records("ev", ("s1",), 1)
    assert first.terminate() == 0

    cluster.subscriber("ev", "s1", *state)  # reads its window back from the state dir
    with publisher_for(cluster, "ev") as pub:
        assert pub.publish([dict(pub.event("y"), id="PUB-7")])["accepted"] == 1

    records = cluster.wait_for_records("ev", ("s1",), 2)["s1"]
    assert [r["id"] for r in records] == ["evil PUB-7", "PUB-7"]  # its handler ran


def test_markup_and_escapes_in_partitions_and_nacks_are_printed_literally(
    cluster: Cluster,
) -> None:
    # Given a poison event in a partition named like markup, dead-lettered by its handler
    cluster.broker("mk", extra=("--max-attempts", "2"))
    subscriber = cluster.subscriber("mk", "s1", "--fault", f"fail-on:{POISON_ID}")
    with publisher_for(cluster, "mk") as pub:
        poison = dict(pub.event("x", partition=MARKUP_PARTITION), id=POISON_ID)
        assert pub.publish([poison])["accepted"] == 1
    wait_until(lambda: channel_stats(cluster, "mk")["dead_letters"] == 1, what="dead letter")
    # and one more event of that partition waiting while nobody is subscribed
    assert subscriber.terminate() == 0
    with publisher_for(cluster, "mk") as pub:
        assert pub.publish([pub.event("y", partition=MARKUP_PARTITION)])["accepted"] == 1

    # When the tables are printed
    letters = cluster.run(["-m", "channel_server", "dead-letters", "mk", *cluster.ns])
    status = cluster.run(["-m", "channel_server", "status", "mk", *cluster.ns])

    # Then both succeed and show the strings as they are, escapes made visible
    assert (letters.returncode, letters.stderr) == (0, "")
    assert (status.returncode, status.stderr) == (0, "")
    assert f"injected failure on {SHOWN_POISON_ID}" in letters.stdout
    assert SHOWN_POISON_ID in letters.stdout and f" {MARKUP_PARTITION} " in letters.stdout
    row = next(line for line in status.stdout.splitlines() if MARKUP_PARTITION in line)
    assert [cell.strip() for cell in row.split("│")] == ["PUB", MARKUP_PARTITION, "-", "1", "0"]
    assert "\x1b" not in letters.stdout + status.stdout


@pytest.mark.parametrize("standalone", [False, True], ids=["embedded", "standalone"])
def test_a_regex_listing_is_refused_at_once_and_listing_still_works(
    cluster: Cluster, standalone: bool
) -> None:
    if standalone:
        cluster.start("ns", ["-m", "channel_server", "nameserver", *cluster.ns], "ready at")
    cluster.broker(EVIL_NAME)

    with locate_ns("127.0.0.1", cluster.ns_port) as ns:  # as the owner: every right
        for call in (
            lambda: ns.list(regex=HOSTILE_REGEX),
            lambda: ns.list(None, HOSTILE_REGEX, True),
            lambda: ns.remove(regex=HOSTILE_REGEX),
        ):
            started = time.monotonic()
            with pytest.raises(NotAuthorized, match="regex"):
                call()
            assert time.monotonic() - started < REFUSAL_BUDGET_S
        assert NS_CHANNEL_PREFIX + EVIL_NAME in ns.list(prefix=NS_CHANNEL_PREFIX)

    listing = cluster.run(["-m", "channel_server", "list", *cluster.ns])
    assert listing.returncode == 0, listing.stderr
    assert EVIL_NAME in listing.stdout
