"""The status and dead-letter tables show what the service holds literally: no markup is
interpreted, and characters that are not printable appear as escape sequences."""

from __future__ import annotations

import io

from rich.console import Console

from channel_server.status import render_channel, render_dead_letters, render_unreachable

HOSTILE = "[bold]x[/bold] [/oops] \x1b[2J\x07 tab\tline\nlone\udc80 ünï 事件 end\\"
SHOWN = "[bold]x[/bold] [/oops] \\x1b[2J\\x07 tab\\tline\\nlone\\udc80 ünï 事件 end\\"


def printed(render) -> str:
    out = io.BytesIO()
    text = io.TextIOWrapper(out, encoding="utf-8")  # strict: a lone surrogate would fail
    render(Console(file=text, width=400, highlight=False, color_system=None))
    text.flush()
    return out.getvalue().decode("utf-8")


def test_dead_letters_show_hostile_text_literally() -> None:
    letter = {
        "id": HOSTILE,
        "publisher_id": "PUB",
        "partition": HOSTILE,
        "group": "default",
        "failures": 3,
        "error": f"ValueError: {HOSTILE}",
    }
    out = printed(lambda console: render_dead_letters(console, "c", [letter]))
    assert out.count(SHOWN) == 3
    assert f"ValueError: {SHOWN}" in out
    assert "\x1b" not in out and "\x07" not in out


def channel_stats_with(partitions: list[int | str]) -> dict:
    stats = hostile_channel_stats()
    rows = stats["groups"]["default"]["partitions"]
    stats["groups"]["default"]["partitions"] = [dict(rows[0], partition=p) for p in partitions]
    return stats


def test_partitions_are_listed_in_numeric_order_then_by_name() -> None:
    stats = channel_stats_with([10, "eu", 2, "asia", 1])
    out = printed(lambda console: render_channel(console, "b", stats))
    rows = [line.split()[2] for line in out.splitlines() if line.startswith("PUB ")]
    assert rows == ["1", "2", "10", "asia", "eu"]


def test_channel_status_shows_hostile_text_literally() -> None:
    stats = hostile_channel_stats()
    out = printed(lambda console: render_channel(console, "b[/x]", stats))
    assert "c (queue, ids unique per publisher) on broker b[/x]: 1/10 unacknowledged" in out
    assert SHOWN in out and "\x1b" not in out


def hostile_channel_stats() -> dict:
    return {
        "name": "c",
        "kind": "queue",
        "ids": "publisher",
        "unacked": 1,
        "capacity": 10,
        "accepted": 1,
        "acked": 0,
        "dead_letters": 0,
        "groups": {
            "default": {
                "backlog": 1,
                "members": [],
                "partitions": [
                    {
                        "publisher_id": "PUB",
                        "partition": HOSTILE,
                        "owner": None,
                        "pending": 1,
                        "in_flight": 0,
                    }
                ],
            }
        },
    }


def test_an_unreachable_broker_is_reported_literally() -> None:
    error = ConnectionError("[Errno 111] [/refused]\x1b[0m")
    out = printed(lambda console: render_unreachable(console, "c", "b1", error))
    assert out == "c on broker b1: unreachable ([Errno 111] [/refused]\\x1b[0m)\n"


def test_a_channel_with_cold_events_says_how_many() -> None:
    quiet = printed(lambda console: render_channel(console, "b1", hostile_channel_stats()))
    assert "payloads" not in quiet  # nothing went cold: nothing said
    stats = hostile_channel_stats() | {"queued_cold": 7, "read_back": 5}
    out = printed(lambda console: render_channel(console, "b1", stats))
    assert "0 dead letters; 7 queued without their payloads, 5 read back from the store" in out


def test_a_group_listing_only_its_busiest_partitions_says_how_many_it_has() -> None:
    everything = printed(lambda console: render_channel(console, "b1", hostile_channel_stats()))
    assert "busiest" not in everything  # the only partition is listed
    stats = hostile_channel_stats()
    stats["groups"]["default"]["partitions_total"] = 100_000
    out = printed(lambda console: render_channel(console, "b1", stats))
    assert "(the 1 busiest of 100000 partitions)" in out


def test_a_busy_channel_says_its_short_pushes_wait_and_why() -> None:
    quiet = printed(lambda console: render_channel(console, "b1", hostile_channel_stats()))
    assert "busy" not in quiet
    figures = {"broker_cpu_share": 0.4, "machine_cpu_share": 0.9, "busy": True}
    out = printed(lambda console: render_channel(console, "b1", hostile_channel_stats() | figures))
    assert "busy: short pushes wait to fill (the broker used 40 % of a core, and the" in out
    assert "CPUs it runs on were 90 % busy" in out
