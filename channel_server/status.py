"""Readable tables of channel state for ``status`` and ``dead-letters`` (rich).

Every string that comes from the service (names, partitions, ids, error messages) is
shown as it is: every line and cell is a plain ``Text``, never parsed as markup, so
"[/oops]" in a partition or a nack message prints as "[/oops]" instead of failing
(MarkupError) or styling the rest of the line. Characters that are not printable (ESC and
other control codes, line breaks, lone surrogates) are shown as escape sequences, so such
a string can neither drive the terminal nor fail to encode.
"""

from __future__ import annotations

import sys
from typing import Any

from rich.console import Console, RenderableType
from rich.table import Table
from rich.text import Text

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
    for part in channel_renderables(broker, stats):
        console.print(part)


def channel_renderables(broker: str, stats: dict[str, Any]) -> list[RenderableType]:
    """What ``status`` shows of one channel, as rich renderables (printed, or refreshed
    in place by ``status --watch``)."""
    summary = (
        f" ({stats['kind']}, ids unique per {stats['ids']}) on broker {broker}: "
        f"{stats['unacked']}/{stats['capacity']} unacknowledged, {stats['accepted']} accepted, "
        f"{stats['acked']} done (acknowledged or dead-lettered), "
        f"{stats['dead_letters']} dead letters"
    )
    if stats.get("queued_cold"):  # only once a backlog outgrew --payload-memory
        summary += (
            f"; {stats['queued_cold']} queued without their payloads, "
            f"{stats['read_back']} read back from the store"
        )
    parts: list[RenderableType] = [_line(_bold(stats["name"]), summary)]
    if "rates" in stats:  # a broker from before rates says nothing about them
        parts.append(Text(f"  {rates_line(stats['rates'])}"))
    if stats.get("busy"):
        parts.append(Text(f"  {busy_line(stats)}"))
    for name, group in stats["groups"].items():
        parts.append(_line("  group ", _bold(name), f": backlog {group['backlog']}"))
        parts.append(_members_table(group["members"]))
        if group["partitions"]:
            parts.append(_partitions_table(group["partitions"]))
        if (total := group.get("partitions_total", 0)) > len(group["partitions"]):
            listed = len(group["partitions"])
            parts.append(Text(f"  (the {listed} busiest of {total} partitions)"))
    return parts


def busy_line(stats: dict[str, Any]) -> str:
    """Why latency is up on a saturated broker: its short pushes wait to fill."""
    return (
        f"busy: short pushes wait to fill (the broker used "
        f"{100 * stats['broker_cpu_share']:.0f} % of a core, and the CPUs it runs on were "
        f"{100 * stats['machine_cpu_share']:.0f} % busy, over the second before a recent "
        "publish)"
    )


def status_renderables(
    channels: list[tuple[str, str, dict[str, Any] | Exception]],
) -> list[RenderableType]:
    """What ``status`` shows of these (channel, broker, stats or why unreachable)."""
    parts: list[RenderableType] = []
    for name, broker, stats in channels:
        if isinstance(stats, Exception):
            parts.append(unreachable_line(name, broker, stats))
        else:
            parts.extend(channel_renderables(broker, stats))
    return parts or [Text("no channels")]


def rates_line(rates: dict[str, float] | None) -> str:
    """ "12.3 ev/s in, 11.9 ev/s acked over the last 10 s", or why there is no rate yet."""
    if not rates:
        return "rates: not measured yet (the broker samples its counts every second)"
    interval = rates["interval_s"]
    span = f"{interval:.0f}" if interval >= 10 else f"{interval:.1f}"
    return (
        f"{rates['accepted_per_s']:.1f} ev/s in, {rates['acked_per_s']:.1f} ev/s acked "
        f"over the last {span} s"
    )


def _members_table(members: list[dict[str, Any]]) -> Table:
    table = Table(show_edge=False, pad_edge=False)
    for title, _ in MEMBER_COLUMNS:
        table.add_column(title, justify="left" if title == "member" else "right")
    for member in members:
        table.add_row(*(_cell(member[key]) for _, key in MEMBER_COLUMNS))
    if not members:
        table.add_row(Text("(no members)"), *[""] * (len(MEMBER_COLUMNS) - 1))
    return table


def _partitions_table(partitions: list[dict[str, Any]]) -> Table:
    table = Table(show_edge=False, pad_edge=False)
    for title in ("publisher", "partition", "owner", "pending", "in flight"):
        table.add_column(title, justify="right" if title in ("pending", "in flight") else "left")
    for p in sorted(partitions, key=_partition_order):
        row = (p["publisher_id"], p["partition"], p["owner"] or "-", p["pending"], p["in_flight"])
        table.add_row(*map(_cell, row))
    return table


DEAD_LETTER_COLUMNS = (
    ("id", "id"),
    ("publisher", "publisher_id"),
    ("partition", "partition"),
    ("group", "group"),
    ("failures", "failures"),
    ("error", "error"),
)


def render_dead_letters(console: Console, channel: str, letters: list[dict[str, Any]]) -> None:
    if not letters:
        console.print(Text(f"{_visible(channel)}: no dead letters"))
        return
    title = Text(f"{_visible(channel)}: {len(letters)} dead letters")
    table = Table(title=title, show_edge=False)
    for heading, _ in DEAD_LETTER_COLUMNS:
        table.add_column(heading)
    for letter in letters:
        table.add_row(*(_cell(letter[key]) for _, key in DEAD_LETTER_COLUMNS))
    console.print(table)


def render_unreachable(console: Console, channel: str, broker: str, error: Exception) -> None:
    console.print(unreachable_line(channel, broker, error))


def unreachable_line(channel: str, broker: str, error: Exception) -> Text:
    return _line(_bold(channel), f" on broker {broker}: unreachable ({error})")


def _cell(value: Any) -> Text:
    """A table cell that shows ``value`` literally."""
    if isinstance(value, bool):
        return Text("yes" if value else "NO")
    return Text(_visible(value))


def _bold(value: Any) -> Text:
    return Text(_visible(value), style="bold")


def _line(*parts: str | Text) -> Text:
    """One line of plain parts (never read as markup) and styled ones."""
    return Text.assemble(*(_visible(p) if isinstance(p, str) else p for p in parts))


def _visible(value: Any) -> str:
    """``str(value)`` with each character that is not printable as its escape sequence."""
    text = str(value)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in text)


def _partition_order(row: dict[str, Any]) -> tuple[str, bool, int, str]:
    """By publisher, then integer partitions in numeric order (2 before 10), then named ones."""
    partition = row["partition"]
    numeric = type(partition) is int
    return (row["publisher_id"], not numeric, partition if numeric else 0, str(partition))
