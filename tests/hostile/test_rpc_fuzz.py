"""Hypothesis at the RPC boundary: every exposed method of every daemon, every serializer,
any arguments, as the owner, as a user of limited rights and as strangers.

The contract checked: a call succeeds or is refused with a typed error; a stranger or a
serializer other than msgpack is rejected at the handshake; nothing else (no untyped
error, no dropped connection, no silence), the process stays alive and within its bounds,
and a normal client gets through afterwards.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, Phase, given, settings

from tests.hostile import tally
from tests.hostile.caller import Call, Caller
from tests.hostile.daemons import DAEMONS, daemon
from tests.hostile.health import Bound, close_row, failures
from tests.hostile.procinfo import Sampler
from tests.hostile.rawwire import DAEMON_OBJECT, MSGPACK, SERIALIZER_IDS
from tests.hostile.services import Service
from tests.hostile.targets import Target, calls

pytestmark = pytest.mark.hostile
SHARE = {"broker": 0.5, "embedded-ns": 0.15, "standalone-ns": 0.15, "callback": 0.2}
"""How the call budget is split between the daemons."""
FUZZ_BOUND = Bound(
    threads=24,
    rss_mib=64,
    why="the fuzzer keeps one connection per (serializer, caller) that gets in: 2 when only "
    "msgpack callers with a credential do, 16 at most, each worth one Pyro5 worker; 8 more "
    "for the process's own helpers. A call carries a few KiB at most, so what the service "
    "may keep of them is a few MiB; 64 MiB leaves room for the allocator, not for a leak "
    "that grows with the calls",
)


def fuzz(target: Target, examples: int, results: tally.Tally) -> None:
    """``examples`` random calls on the target, every outcome tallied (none asserted
    here: the test judges the whole run, so one run lists every kind of problem)."""
    caller = Caller(target.address, results)

    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(call=calls(target))
    def one(call: Call) -> None:
        caller.call(call)

    try:
        one()
    finally:
        caller.close()


@pytest.mark.parametrize("which", DAEMONS)
def test_random_calls_get_a_result_or_a_typed_refusal(
    service: Service, calls_budget: int, which: str
) -> None:
    fuzzed, results = daemon(service, which), tally.Tally()
    examples = max(1, int(calls_budget * SHARE[which]))
    with Sampler(fuzzed.proc.popen.pid) as sampler:
        fuzz(fuzzed.target, examples, results)
    row, round_error = close_row(
        f"fuzz {which}", fuzzed.proc, sampler, results, fuzzed.client_round
    )
    found = results.problems() + failures(row, FUZZ_BOUND, round_error)
    if results.calls < examples // 2:  # most calls can be encoded: the fuzz must reach it
        found.append(f"only {results.calls} of {examples} calls reached {which}")
    assert not found, "\n".join(found)


@pytest.mark.parametrize("which", DAEMONS)
def test_wrong_arity_is_an_invalid_argument(service: Service, which: str) -> None:
    """Every exposed method, called by a caller that may call it, with one argument too
    many, one too few and an unknown keyword: InvalidArgument each time, not TypeError."""
    target = daemon(service, which).target
    who, results = target.members[0], tally.Tally()
    caller, wrong = Caller(target.address, results), {}
    one_per_class = {endpoint.cls: endpoint for endpoint in target.endpoints}.values()
    try:
        for endpoint in one_per_class:
            for method in endpoint.methods:
                for shape, args, kwargs in _wrong_shapes(*endpoint.parameters(method)):
                    call = Call(endpoint.object_id, method, args, kwargs, MSGPACK, who)
                    outcome = caller.call(call)
                    if outcome.label != f"{tally.REFUSED}:InvalidArgument":
                        where = f"{endpoint.object_id}.{method} {shape}"
                        wrong[where] = f"{outcome.label} {outcome.message}"
    finally:
        caller.close()
    assert results.calls > 0
    assert not wrong, "\n".join(f"{k}: {v}" for k, v in sorted(wrong.items()))


def _wrong_shapes(params: list[str], required: int) -> list[tuple[str, list, dict]]:
    shapes = [
        ("one argument too many", [None] * (len(params) + 1), {}),
        ("an unknown keyword", [None] * required, {"no_such_parameter": 1}),
    ]
    if required:
        shapes.append(("one argument too few", [None] * (required - 1), {}))
    return shapes


def test_every_serializer_but_msgpack_is_rejected_with_a_reason(service: Service) -> None:
    """Each daemon refuses a handshake in serpent, json or marshal, even with a valid
    credential, with a one-line reason."""
    seen = {}
    for which in DAEMONS:
        target = daemon(service, which).target
        caller = Caller(target.address, tally.Tally())
        try:
            for serializer in sorted(set(SERIALIZER_IDS) - {MSGPACK}):
                ping = Call(DAEMON_OBJECT, "ping", [], {}, serializer, target.members[0])
                seen[f"{which} {serializer}"] = caller.call(ping)
        finally:
            caller.close()
    wrong = {k: o for k, o in seen.items() if o.kind != tally.REJECTED or not o.message}
    assert not wrong, "\n".join(f"{k}: {o.label} {o.message}" for k, o in wrong.items())
    assert all("\n" not in o.message for o in seen.values())
