"""The broker and a subscriber's callback daemon prove to each other that they know the
callback secret, which never crosses the wire: a process that took a dead subscriber's
port learns nothing it can use and is sent nothing."""

from __future__ import annotations

import pytest
from Pyro5.errors import CommunicationError

from channel_server.errors import NotAuthorized
from channel_server.guard import SUBSCRIBER_ROLE, callback_credential, secret_gate
from channel_server.proofs import PROOF_TARGET, PROOF_WINDOW_S, Proofs, Target, mac
from channel_server.wire import MutualProxy

SECRET = "the-callback-secret"
PORT = 4711
"""The callback daemon's port in these tests."""


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class Conn:
    """What the gate reads of a connection: what a proof must be made for (the daemon
    sets it), and its socket (for the log line)."""

    sock = None

    def __init__(self, port: int = PORT, since: float | None = None) -> None:
        setattr(self, PROOF_TARGET, Target(port, since))


def proof() -> dict:
    """The broker's handshake to the callback daemon at PORT."""
    return callback_credential(SECRET).handshake(PORT)


def gate_at(now: float, secret: str = SECRET):  # type: ignore[no-untyped-def]
    clock = Clock(now)
    return secret_gate(secret, "subscriber s1", clock), clock


def test_the_handshake_carries_a_proof_never_the_secret() -> None:
    first, second = proof(), proof()
    assert SECRET not in repr(first)
    assert first["user"] == "broker"
    assert first["nonce"] != second["nonce"]  # fresh for every connection


def sent_by_proxy() -> tuple[MutualProxy, dict]:
    """The broker's proxy to the callback daemon at PORT, and what it sends as it connects
    (made then, for that port)."""
    uri = f"PYRO:x@127.0.0.1:{PORT}"
    proxy = MutualProxy(uri, callback_credential(SECRET), SUBSCRIBER_ROLE)
    return proxy, proxy._pyroHandshake


def test_a_proof_is_admitted_once_and_answered_with_the_daemons_own() -> None:
    proxy, handshake = sent_by_proxy()
    assert handshake["to"] == PORT and proxy._pyroHandshake["nonce"] != handshake["nonce"]
    proxy, handshake = sent_by_proxy()
    gate, _ = gate_at(handshake["time"])
    answer = gate(Conn(), handshake)
    proxy._pyroValidateHandshake(answer)  # the broker accepts the daemon
    with pytest.raises(NotAuthorized):
        gate(Conn(), handshake)  # replayed


@pytest.mark.parametrize(
    "handshake",
    [
        {"user": "broker", "secret": SECRET},  # the old form: the secret itself
        {k: v for k, v in proof().items() if k != "to"},  # made for no daemon
        callback_credential("another-secret").handshake(PORT),
        {**proof(), "nonce": "0" * 32},
        {**proof(), "proof": "f" * 64},
        "welcome",
        None,
    ],
)
def test_anything_but_a_proof_of_the_secret_is_refused(handshake: object) -> None:
    gate, _ = gate_at(proof()["time"])
    with pytest.raises(NotAuthorized, match="admits only the broker it subscribed with"):
        gate(Conn(), handshake)


@pytest.mark.parametrize(
    "skew_s, said", [(PROOF_WINDOW_S + 1, "301 s behind"), (-PROOF_WINDOW_S - 1, "301 s ahead of")]
)
def test_a_proof_made_too_long_ago_or_ahead_is_refused_saying_the_clocks_differ(
    skew_s: float, said: str
) -> None:
    handshake = proof()
    gate, _ = gate_at(handshake["time"] + skew_s)
    with pytest.raises(NotAuthorized, match=f"made {said} this daemon's clock .*clocks of the"):
        gate(Conn(), handshake)


def test_a_wrong_proof_from_a_clock_far_off_is_still_only_a_wrong_one() -> None:
    handshake = callback_credential("another-secret").handshake(PORT)
    gate, _ = gate_at(handshake["time"] + 3600.0)
    with pytest.raises(NotAuthorized) as refused:
        gate(Conn(), handshake)
    assert refused.value.reason == "subscriber s1 admits only the broker it subscribed with"


def test_a_replay_stays_refused_until_its_proof_is_too_old_anyway() -> None:
    handshake = proof()
    gate, clock = gate_at(handshake["time"])
    gate(Conn(), handshake)
    for later in (1.0, PROOF_WINDOW_S / 2, PROOF_WINDOW_S):
        clock.now = handshake["time"] + later
        with pytest.raises(NotAuthorized):
            gate(Conn(), handshake)


@pytest.mark.parametrize("answer", ["welcome", {"proof": "0" * 64}, None, {}])
def test_the_broker_sends_nothing_to_a_daemon_that_cannot_prove_the_secret(
    answer: object,
) -> None:
    proxy, _ = sent_by_proxy()
    with pytest.raises(CommunicationError, match="did not prove it knows the secret"):
        proxy._pyroValidateHandshake(answer)


def test_a_daemon_with_another_secret_cannot_prove_it() -> None:
    proxy, handshake = sent_by_proxy()
    other, _ = gate_at(handshake["time"], secret="another-secret")
    with pytest.raises(NotAuthorized):
        other(Conn(), handshake)
    ours, _ = gate_at(handshake["time"], secret="another-secret")
    forged = ours(Conn(), callback_credential("another-secret").handshake(PORT))
    with pytest.raises(CommunicationError):
        proxy._pyroValidateHandshake(forged)


def proof_made_at(made_at: float, user: str = "broker") -> dict:
    nonce = f"{int(made_at):032d}"
    return {
        "user": user,
        "nonce": nonce,
        "time": made_at,
        "to": PORT,
        "mono": 1.0,
        "proof": mac(SECRET, user, nonce, repr(made_at), str(PORT), repr(1.0)),
    }


def test_nonces_are_forgotten_once_their_proofs_would_be_too_old_anyway() -> None:
    clock = Clock(1000.0)
    checks = Proofs(SECRET, "broker", clock)
    first = proof_made_at(1000.0)
    assert checks.admit(first, Target(PORT)) == first["nonce"]
    assert checks.admit(first, Target(PORT)) is None  # replayed
    clock.now = 1000.0 + 2 * PROOF_WINDOW_S + 1
    later = proof_made_at(clock.now)
    assert checks.admit(later, Target(PORT)) == later["nonce"]
    assert list(checks._seen) == [later["nonce"]]  # the first one is forgotten


def test_a_proof_is_good_only_at_the_daemon_it_was_made_for() -> None:
    """One made for another port (a process that held that port while its daemon was
    away collected it) is refused here, and said so only to one that proves the secret."""
    handshake = proof()
    gate, _ = gate_at(handshake["time"])
    with pytest.raises(NotAuthorized, match=f"made for the daemon at port {PORT}, not this one"):
        gate(Conn(port=PORT + 1), handshake)
    stranger = callback_credential("another-secret").handshake(PORT)
    with pytest.raises(NotAuthorized, match="admits only the broker it subscribed with"):
        gate(Conn(port=PORT + 1), stranger)


def test_a_proof_made_before_the_daemon_listened_is_refused_from_this_machine() -> None:
    """Made while another process held the port: the daemon began to listen later. From
    another machine (no ``since``: its clock may differ a little) the window applies."""
    handshake = proof()
    gate, _ = gate_at(handshake["time"] + 1.0)
    with pytest.raises(NotAuthorized, match="made before this daemon began to listen"):
        gate(Conn(since=handshake["mono"] + 0.5), handshake)
    assert gate(Conn(since=None), handshake)  # the same proof, from elsewhere
