"""Partial failures are named and exit non-zero; failures to connect are quiet (issue 14,
items 6 and 8), with real processes.

* ``publish --file`` with invalid rows publishes the rest, names the lines of the invalid
  ones and exits 7 (done in part);
* ``dead-letters --id`` of an id that names no dead letter says which and exits 7 (the
  known ones are still replayed or listed);
* ``publish`` with no name server or broker logs one warning when it starts retrying (not
  one per retry) and ends with a one-line error, exit 3.
"""

from __future__ import annotations

import json
import re

import pytest

from tests.integration.conftest import channel_stats, publisher_for
from tests.integration.procs import Cluster, wait_until

pytestmark = pytest.mark.integration
EXIT_UNAVAILABLE = 3
EXIT_PARTIAL = 7
BASE_TS = 1_700_000_000.0


def row(event_id: str, **changes: object) -> str:
    fields = {"id": event_id, "publisher_id": "P", "partition": 0, "timestamp": BASE_TS}
    return json.dumps(fields | changes)


def test_invalid_rows_are_named_by_line_and_the_rest_is_published(cluster: Cluster) -> None:
    # Given a file with 4 valid rows and invalid ones on lines 3 and 6 (line 4 is blank)
    cluster.broker("batch")
    lines = [
        row("e1"),
        row("e2"),
        row("bad-publisher", publisher_id="not valid!"),
        "",
        row("e3"),
        "{not json",
        row("e4"),
    ]
    path = cluster.tmp / "batch.jsonl"
    path.write_text("\n".join(lines) + "\n")
    # When it is published directly
    argv = ["-m", "publisher", "publish", *cluster.ns, "--channel", "batch", "--id", "P"]
    result = cluster.run(
        [*argv, "--file", str(path), "--spark", "never", "--no-progress", "--json"]
    )
    # Then the valid rows are published, the invalid ones named by line, exit 7
    assert result.returncode == EXIT_PARTIAL, result.stderr
    out = result.stdout.splitlines()
    assert "2 invalid rows were not published: line 3, line 6" in out
    assert any(re.match(r"  line 3: publisher_id: must be", line) for line in out), out
    assert any(line.startswith("  line 6: malformed JSON") for line in out), out
    figures = json.loads(out[-1])
    assert (figures["accepted"], figures["invalid"]) == (4, 2)
    assert channel_stats(cluster, "batch")["accepted"] == 4


def test_unknown_dead_letter_ids_are_named_and_the_known_ones_replayed(
    cluster: Cluster,
) -> None:
    # Given a dead letter e1 (its handler always fails)
    cluster.broker("dl")
    cluster.subscriber("dl", "s1", "--fault", "fail-on:e1")
    with publisher_for(cluster, "dl", "A") as pub:
        events = [pub.event("ok"), pub.event("poison")]
        events[0]["id"], events[1]["id"] = "e0", "e1"
        assert pub.publish(events)["accepted"] == 2
    wait_until(lambda: channel_stats(cluster, "dl")["dead_letters"] == 1, what="a dead letter")
    base = ["-m", "channel_server", "dead-letters", "dl", *cluster.ns]

    # When a replay names only an id that is not there: nothing is queued, and it says so
    nope = cluster.run([*base, "--replay", "--id", "NOPE-1"])
    assert nope.returncode == EXIT_PARTIAL
    assert nope.stdout.strip() == "dl: 0 dead letters queued again"
    assert nope.stderr.strip().splitlines() == ["error: not in the dead-letter queue of dl: NOPE-1"]

    # A listing names it the same way, after what it found
    listed = cluster.run([*base, "--json", "--id", "e1", "--id", "A/nope"])
    assert listed.returncode == EXIT_PARTIAL
    assert [d["id"] for d in json.loads(listed.stdout)] == ["e1"]
    assert "not in the dead-letter queue of dl: A/nope" in listed.stderr

    # And a replay of a known and an unknown id queues the known one
    mixed = cluster.run([*base, "--replay", "--id", "A/e1", "--id", "NOPE-2"])
    assert mixed.returncode == EXIT_PARTIAL
    assert mixed.stdout.strip() == "dl: 1 dead letters queued again"
    assert mixed.stderr.strip().splitlines() == [
        "error: not in the dead-letter queue of dl: NOPE-2"
    ]


def test_publish_without_a_broker_warns_once_and_fails_in_one_line(cluster: Cluster) -> None:
    # Given no name server and no broker at the address
    argv = ["-m", "publisher", "publish", *cluster.ns, "--channel", "c", "--id", "P"]
    # When a publisher keeps retrying for a while (5 retries of 0.2 s)
    result = cluster.run([*argv, "--count", "3", "--retry-for", "1"])
    # Then one warning says it is retrying, one line says it gave up, exit 3
    assert result.returncode == EXIT_UNAVAILABLE
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 2, result.stderr
    assert re.search(r"WARNING .*ping on c failed .*; retrying for up to 1 s$", lines[0])
    assert lines[1].startswith("error: channel c: no answer after 6 attempts (name server ")
    assert "retry" not in lines[1]
