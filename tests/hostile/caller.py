"""Hostile calls on raw connections, each classified as a :class:`tally.Outcome`.

A :class:`Caller` keeps one connection per (serializer, credential) to one daemon and
sends whatever call it is given: unknown objects and methods, any arguments, batches. A
connection the daemon rejects, drops or stops answering is opened again for the next call.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import Pyro5.errors
import Pyro5.protocol as wire

from channel_server.credentials import Credential
from tests.hostile import tally
from tests.hostile.rawwire import (
    DAEMON_OBJECT,
    MSGPACK,
    SERIALIZER_IDS,
    RawConnection,
    call_payload,
    decode,
    frame,
    is_exception,
)
from tests.hostile.tally import Outcome

CALL_TIMEOUT_S = 10.0
BATCH = "<batch>"
"""Pyro5's method name for a batch of calls (FLAGS_BATCH)."""
_AFTER_ERROR = "after an error reply"


@dataclass(frozen=True)
class Who:
    """A caller's identity: a label for the tally and the credential it presents."""

    label: str
    credential: Credential | None
    admitted: bool
    """Whether the daemon should let it in (strangers are rejected at the handshake)."""


@dataclass(frozen=True)
class Call:
    object_id: str
    method: str
    args: list[Any] = field(default_factory=list)
    kwargs: dict[Any, Any] = field(default_factory=dict)
    serializer: str = MSGPACK
    who: Who = Who("anonymous", None, False)
    where: str = ""
    """What kind of call it is, for the tally (``Class.method``, ``?`` for an unknown
    object or method); by default the object id and method."""

    @property
    def site(self) -> str:
        return self.where or f"{self.object_id}.{self.method}"

    def __str__(self) -> str:
        return (
            f"[{self.serializer}, {self.who.label}] {self.object_id}.{self.method}"
            f"(*{self.args!r}, **{self.kwargs!r})"
        )


class Caller:
    """Sends calls to the daemon at ``address``; owned by one thread."""

    def __init__(self, address: tuple[str, int], results: tally.Tally) -> None:
        self.address = address
        self.tally = results
        self._conns: dict[tuple[str, str], RawConnection] = {}
        self._last: dict[tuple[str, str], Outcome] = {}
        """What the call before got on each connection: a daemon may hang up after an
        error reply (Pyro5 does after a SerializeError); the next call then goes again on
        a new connection."""
        self._seq = 0

    def call(self, call: Call) -> Outcome:
        """Send one call and tally what came back."""
        try:
            payload = call_payload(
                call.serializer, call.object_id, call.method, call.args, call.kwargs
            )
        except Exception as exc:  # this serializer cannot carry these arguments at all
            outcome = Outcome(tally.UNSENDABLE, type(exc).__name__)
            self.tally.add(call.site, outcome)
            return outcome
        outcome = self._send(call, payload)
        self.tally.add(call.site, outcome, str(call), len(payload))
        return outcome

    def _send(self, call: Call, payload: bytes) -> Outcome:
        reused = _key(call) in self._conns
        conn = self._connection(call)
        if isinstance(conn, Outcome):
            return _judge_rejection(call, conn)
        outcome = self._invoke(conn, call, payload)
        if outcome.kind == tally.DROPPED and reused and outcome.detail == _AFTER_ERROR:
            self.tally.reconnects += 1  # the daemon hung up after refusing the call before
            return self._send(call, payload)
        self._last[_key(call)] = outcome
        return _judge_admission(call, outcome)

    def _invoke(self, conn: RawConnection, call: Call, payload: bytes) -> Outcome:
        self._seq = (self._seq + 1) & 0xFFFF
        flags = wire.FLAGS_BATCH if call.method == BATCH else 0
        data = frame(
            wire.MSG_INVOKE,
            payload,
            serializer_id=SERIALIZER_IDS[call.serializer],
            flags=flags,
            seq=self._seq,
        )
        try:
            conn.send(data)
            reply = conn.receive()
        except (Pyro5.errors.ConnectionClosedError, ConnectionError, TimeoutError) as exc:
            kind = tally.TIMEOUT if isinstance(exc, TimeoutError) else tally.DROPPED
            before = self._last.get(_key(call))
            self._forget(_key(call))
            if kind == tally.DROPPED and before is not None and before.kind != tally.OK:
                return Outcome(kind, _AFTER_ERROR, f"{exc} after {before.label}")
            return Outcome(kind, type(exc).__name__, str(exc))
        return classify_reply(reply)

    def _connection(self, call: Call) -> RawConnection | Outcome:
        """The open connection for this call's serializer and identity, or the outcome of
        a connect the daemon did not accept."""
        if (known := self._conns.get(_key(call))) is not None:
            return known
        conn = None
        try:
            conn = RawConnection(self.address, CALL_TIMEOUT_S)
            answer = conn.connect(call.who.credential, DAEMON_OBJECT, call.serializer)
        except (Pyro5.errors.ConnectionClosedError, OSError) as exc:  # refused, reset, timeout
            if conn is not None:
                conn.close()
            kind = tally.TIMEOUT if isinstance(exc, TimeoutError) else tally.DROPPED
            return Outcome(kind, "at connect", str(exc))
        if answer.type == wire.MSG_CONNECTFAIL:
            conn.close()
            return tally.of_rejection(str(_decoded(answer)))
        self._conns[_key(call)] = conn
        return conn

    def _forget(self, key: tuple[str, str]) -> None:
        self._last.pop(key, None)
        conn = self._conns.pop(key, None)
        if conn is not None:
            conn.close()

    def close(self) -> None:
        for key in list(self._conns):
            self._forget(key)


def _key(call: Call) -> tuple[str, str]:
    return call.serializer, call.who.label


def _judge_rejection(call: Call, outcome: Outcome) -> Outcome:
    """A rejection is right for strangers and other serializers, wrong for the rest."""
    admissible = call.who.admitted and call.serializer == MSGPACK
    if outcome.kind == tally.REJECTED and admissible:
        return Outcome(tally.REJECTED_MEMBER, outcome.detail, outcome.message)
    return outcome


def _judge_admission(call: Call, outcome: Outcome) -> Outcome:
    """A call that got past the handshake: a problem in itself if the caller should
    have been rejected (what the call then got is kept in the message)."""
    if call.serializer != MSGPACK:
        return Outcome(tally.ACCEPTED_SERIALIZER, call.serializer, _inner(outcome))
    if not call.who.admitted:
        return Outcome(tally.ADMITTED_STRANGER, call.who.label, _inner(outcome))
    return outcome


def _inner(outcome: Outcome) -> str:
    return f"let in, then {outcome.label}: {outcome.message}"


def _decoded(reply: wire.ReceivingMessage) -> Any:
    try:
        return decode(reply)
    except Exception as exc:  # e.g. an exception class this client does not know
        return exc


def classify_reply(reply: wire.ReceivingMessage) -> Outcome:
    """A reply to a call: a result, a typed refusal, or an untyped error (one whose
    class this client cannot even rebuild included)."""
    value = _decoded(reply)
    if isinstance(value, BaseException) and not is_exception(reply):
        return Outcome(tally.UNTYPED, "undecodable reply", str(value))
    if is_exception(reply):
        return tally.of_exception(value)
    if reply.flags & wire.FLAGS_BATCH:
        return _classify_batch(value)
    return Outcome(tally.OK)


def _classify_batch(results: Any) -> Outcome:
    """A batch answers a list; a call in it that failed is an exception wrapper."""
    for item in results if isinstance(results, list) else []:
        exc = getattr(item, "exception", item)
        if isinstance(exc, BaseException):
            return tally.of_exception(exc)
    return Outcome(tally.OK)
