"""Readable tables of channel state for ``status`` and ``dead-letters`` (rich)."""

from __future__ import annotations

import sys
from typing import Any

from rich.console import Console
from rich.table import Table

PIPE_WIDTH = 160
"""Columns when the output is not a terminal (rich would assume 80 and cut cells)."""


def make_console() -> Console:
    width = None if sys.stdout.isatty() else PIPE_WIDTH
    return Console(highlight=False, soft_wrap=True, width=width)


MEMBER_COLUMNS = (
    ("member", "id"),
    ("active", "active"),
    ("partitions", "partitions"),
    ("queued", "queued"),
    ("in flight", "in_flight"),
    ("delivered", "delivered"),
    ("acked", "acked"),
    ("small delays", "small_delays"),
    ("long delays", "long_delays"),
    ("failures", "failures"),
)


def render_channel(console: Console, broker: str, stats: dict[str, Any]) -> None:
    console.print(
        f"[bold]{stats['name']}[/bold] ({stats['kind']}, ids unique per {stats['ids']}) "
        f"on broker {broker}: "
        f"{stats['unacked']}/{stats['capacity']} unacknowledged, {stats['accepted']} accepted, "
        f"{stats['acked']} acknowledged, {stats['dead_letters']} dead letters"
    )
    for name, group in stats["groups"].items():
        console.print(f"  group [bold]{name}[/bold]: backlog {group['backlog']}")
        console.print(_members_table(group["members"]))
        if group["partitions"]:
            console.print(_partitions_table(group["partitions"]))


def _members_table(members: list[dict[str, Any]]) -> Table:
    table = Table(show_edge=False, pad_edge=False)
    for title, _ in MEMBER_COLUMNS:
        table.add_column(title, justify="left" if title == "member" else "right")
    for member in members:
        table.add_row(*(_cell(member[key]) for _, key in MEMBER_COLUMNS))
    if not members:
        table.add_row("(no members)", *[""] * (len(MEMBER_COLUMNS) - 1))
    return table


def _partitions_table(partitions: list[dict[str, Any]]) -> Table:
    table = Table(show_edge=False, pad_edge=False)
    for title in ("publisher", "partition", "owner", "pending", "in flight"):
        table.add_column(title, justify="right" if title in ("pending", "in flight") else "left")
    for p in sorted(partitions, key=lambda p: (p["publisher_id"], str(p["partition"]))):
        table.add_row(
            p["publisher_id"],
            str(p["partition"]),
            p["owner"] or "-",
            str(p["pending"]),
            str(p["in_flight"]),
        )
    return table


def render_dead_letters(console: Console, channel: str, letters: list[dict[str, Any]]) -> None:
    if not letters:
        console.print(f"{channel}: no dead letters")
        return
    table = Table(title=f"{channel}: {len(letters)} dead letters", show_edge=False)
    for title in ("id", "publisher", "partition", "group", "failures", "error"):
        table.add_column(title)
    for d in letters:
        table.add_row(
            d["id"],
            d["publisher_id"],
            str(d["partition"]),
            d["group"],
            str(d["failures"]),
            d["error"],
        )
    console.print(table)


def _cell(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "NO"
    return str(value)
