"""The plan: blocks, their LPT assignment to slots, and ``plan.json`` (DESIGN §10).

Both engines reduce a batch to one :class:`GroupStats` per ``(publisher_id, partition)`` and
hand them to :func:`build_plan`, so everything from here on is the same Python code and the
two engines cannot disagree about the assignment. Pure: writing the plan is
:mod:`spark_partitions.output`.

Plan order (the order of ``plan.json["blocks"]`` and of :func:`spark_partitions.blocks.
iter_blocks`) is the LPT order: larger blocks first; equal counts by ``(publisher_id,
str(partition))``. Publishing in that order lets the broker's online least-loaded policy see
the big blocks first, which is what LPT relies on. Each block goes to the least-loaded slot
(ties: the lowest slot number). ``skew`` is the busiest slot's events over the mean; an empty
batch has skew 1.0 (every slot equally idle).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from spark_partitions.rules import IdScope

SKEW_DIGITS = 6
EMPTY_SKEW = 1.0

Partition = str | int


@dataclass(frozen=True, slots=True)
class GroupStats:
    """What an engine knows of one group: the partition still as text."""

    publisher_id: str
    partition_text: str
    all_int: bool
    count: int
    first_timestamp: float
    last_timestamp: float


@dataclass(frozen=True, slots=True)
class Block:
    """One group of events and the slot it is assigned to."""

    publisher_id: str
    partition: Partition
    count: int
    first_timestamp: float
    last_timestamp: float
    slot: int

    @property
    def key(self) -> tuple[str, str]:
        """The engines' join key: publisher and partition as text."""
        return (self.publisher_id, str(self.partition))


@dataclass(frozen=True, slots=True)
class SlotTotal:
    """How much one slot was given."""

    slot: int
    events: int
    blocks: int


@dataclass(frozen=True, slots=True)
class Plan:
    """The whole plan; :meth:`to_json` is exactly the ``plan.json`` document.

    ``id_scope`` (``ids`` in ``plan.json``): which rows counted as duplicates, so a reader
    of ``duplicates_dropped`` knows what was dropped (see ``PlanConfig.id_scope``).
    """

    subscribers: int
    id_scope: str
    total_events: int
    duplicates_dropped: int
    rejected: int
    blocks: tuple[Block, ...]
    slots: tuple[SlotTotal, ...]
    skew: float

    @property
    def integral_partitions(self) -> bool:
        """Whether the partitions are ints (see :func:`resolve_partitions`)."""
        return all(type(block.partition) is int for block in self.blocks)

    def to_json(self) -> dict[str, Any]:
        return {
            "subscribers": self.subscribers,
            "ids": self.id_scope,
            "total_events": self.total_events,
            "duplicates_dropped": self.duplicates_dropped,
            "rejected": self.rejected,
            "blocks": [asdict(block) for block in self.blocks],
            "slots": [asdict(slot) for slot in self.slots],
            "skew": self.skew,
        }


def resolve_partitions(groups: Iterable[GroupStats]) -> list[Block]:
    """Type the partitions (ints only when every group's are), slot unassigned (-1).

    A column has one type: one string partition anywhere makes every partition a string.
    """
    groups = list(groups)
    integral = all(group.all_int for group in groups)
    return [
        Block(
            group.publisher_id,
            int(group.partition_text) if integral else group.partition_text,
            group.count,
            group.first_timestamp,
            group.last_timestamp,
            -1,
        )
        for group in groups
    ]


def lpt_order(blocks: Iterable[Block]) -> list[Block]:
    """Largest first; equal counts by ``(publisher_id, str(partition))``."""
    return sorted(blocks, key=lambda block: (-block.count, block.key))


def assign_slots(blocks: Iterable[Block], subscribers: int) -> list[Block]:
    """LPT: each block, in :func:`lpt_order`, onto the least-loaded slot (ties: lowest)."""
    if subscribers < 1:
        raise ValueError(f"subscribers must be at least 1, got {subscribers}")
    loads = [(0, slot) for slot in range(subscribers)]
    assigned = []
    for block in lpt_order(blocks):
        load, slot = heapq.heappop(loads)
        assigned.append(replace(block, slot=slot))
        heapq.heappush(loads, (load + block.count, slot))
    return assigned


def slot_totals(blocks: Sequence[Block], subscribers: int) -> tuple[SlotTotal, ...]:
    """Events and blocks per slot, every slot listed even when it got nothing."""
    events = [0] * subscribers
    counts = [0] * subscribers
    for block in blocks:
        events[block.slot] += block.count
        counts[block.slot] += 1
    return tuple(SlotTotal(slot, events[slot], counts[slot]) for slot in range(subscribers))


def skew(loads: Sequence[int]) -> float:
    """Busiest load over the mean load; 1.0 when there is nothing to balance."""
    total = sum(loads)
    if not loads or total == 0:
        return EMPTY_SKEW
    return round(max(loads) * len(loads) / total, SKEW_DIGITS)


def build_plan(
    groups: Iterable[GroupStats],
    subscribers: int,
    duplicates_dropped: int,
    rejected: int,
    id_scope: str = IdScope.PUBLISHER,
) -> Plan:
    """The plan of a batch from its group aggregates alone; ``id_scope`` is the dedupe the
    engine applied, recorded in the plan."""
    blocks = assign_slots(resolve_partitions(groups), subscribers)
    slots = slot_totals(blocks, subscribers)
    return Plan(
        subscribers=subscribers,
        id_scope=IdScope(id_scope).value,
        total_events=sum(block.count for block in blocks),
        duplicates_dropped=duplicates_dropped,
        rejected=rejected,
        blocks=tuple(blocks),
        slots=slots,
        skew=skew([slot.events for slot in slots]),
    )
