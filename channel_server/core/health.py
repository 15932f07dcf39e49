"""Health rules for slow and silent subscribers (DESIGN §6), pure and driven by an
explicit clock.

A push round trip over ``small_delay_s`` is a small delay (counted, logged). One over
``long_delay_s`` is a long delay; ``long_delay_count`` of them within
``long_delay_window_s`` mean the member's queued partitions should be offloaded to others,
while it stays active. Failed attempts are counted by the group (see group.py). The
liveness round asks which members are silent (holding events, no sign of life), stuck (a
handler past its timeout) or idle pullers.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from channel_server.core.group import ConsumerGroup


class Delay(StrEnum):
    NONE = "none"
    SMALL = "small"
    LONG = "long"


@dataclass(frozen=True)
class DelayPolicy:
    small_delay_s: float = 0.25
    long_delay_s: float = 1.0
    long_delay_count: int = 3
    long_delay_window_s: float = 30.0

    def classify(self, elapsed_s: float) -> Delay:
        if elapsed_s > self.long_delay_s:
            return Delay.LONG
        if elapsed_s > self.small_delay_s:
            return Delay.SMALL
        return Delay.NONE


class DelayTracker:
    """One member's delay history."""

    def __init__(self, policy: DelayPolicy) -> None:
        self.policy = policy
        self.small = 0
        self.long = 0
        self._recent_long: deque[float] = deque()

    def observe(self, elapsed_s: float, now: float) -> tuple[Delay, bool]:
        """Classify one round trip; the flag says "offload this member's queued work now".

        After an offload the window starts again, so one slow spell moves work once.
        """
        delay = self.policy.classify(elapsed_s)
        if delay is Delay.SMALL:
            self.small += 1
        elif delay is Delay.LONG:
            self.long += 1
            self._recent_long.append(now)
        while self._recent_long and now - self._recent_long[0] > self.policy.long_delay_window_s:
            self._recent_long.popleft()
        if len(self._recent_long) >= self.policy.long_delay_count:
            self._recent_long.clear()
            return delay, True
        return delay, False


# -- members to look at (the broker's liveness round asks) ---------------------------------
def silent(group: ConsumerGroup, now: float, after_s: float) -> list[str]:
    """Active push members holding events that gave no sign of life for ``after_s``:
    frozen, or gone. They are pinged (delivery is judged, not the handlers)."""
    return [
        m.member_id
        for m in group.members.values()
        if m.active and not m.pull and m.flights and now - m.last_seen > after_s
    ]


def stuck(group: ConsumerGroup, now: float, after_s: float) -> list[str]:
    """Active members holding an event longer than the handler timeout."""
    return [
        m.member_id
        for m in group.members.values()
        if m.active and m.flights and now - next(iter(m.flights.values())).sent_at > after_s
    ]


def stalled(group: ConsumerGroup, now: float) -> list[str]:
    """Active members whose work in hand made no progress (no ack) for far longer than
    their pace says an event takes (``Window.stalled``): a long job, marked so."""
    return [m.member_id for m in group.members.values() if m.active and m.check_stall(now)]


def idle_pullers(group: ConsumerGroup, now: float, after_s: float) -> list[str]:
    """Active pull members that have not called ``get`` for ``after_s``."""
    return [
        m.member_id
        for m in group.members.values()
        if m.active and m.pull and now - m.last_seen > after_s
    ]
