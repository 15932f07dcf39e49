"""Over the wire the owner proves it knows the local token and the daemon proves it back:
the token itself is never sent, so whatever listens on a broker's or name server's port
before it (a restart, a broker not started yet) learns nothing it can use."""

from __future__ import annotations

import pytest

from channel_server import proofs
from channel_server.access import USER_ATTRIBUTE, Access
from channel_server.credentials import OWNER, SERVER_ROLE, Credential
from channel_server.errors import NotAuthorized
from channel_server.proofs import PROOF_TARGET, Target

TOKEN = "the-local-token-of-this-user"
PORT = 9090
"""The daemon's port in these tests."""


class Conn:
    """A served connection: what its proof must be made for (the daemon sets it)."""

    sock = None

    def __init__(self, port: int = PORT) -> None:
        setattr(self, PROOF_TARGET, Target(port))


def test_the_owner_proves_the_token_and_gets_the_daemons_proof_back() -> None:
    sent = Credential(OWNER, TOKEN).handshake(PORT)
    assert TOKEN not in repr(sent)
    conn = Conn()
    answer = Access(TOKEN).admit(conn, sent)
    assert getattr(conn, USER_ATTRIBUTE).name == OWNER
    assert proofs.answer_ok(TOKEN, SERVER_ROLE, sent, answer)
    assert not proofs.answer_ok("another-token", SERVER_ROLE, sent, answer)
    assert not proofs.answer_ok(TOKEN, SERVER_ROLE, sent, "welcome")


def test_a_proof_made_for_the_name_server_is_refused_by_the_broker() -> None:
    """A process that held the name server's port while it was away collected proofs
    meant for it: they admit nobody at the broker's port (the attack that made owners of
    strangers), nor at the name server once it listens again (made before)."""
    access, sent = Access(TOKEN), Credential(OWNER, TOKEN).handshake(PORT)
    with pytest.raises(NotAuthorized, match=f"made for the daemon at port {PORT}, not this"):
        access.admit(Conn(PORT + 1), sent)
    back = Conn()
    setattr(back, PROOF_TARGET, Target(PORT, since=sent["mono"] + 0.1))
    with pytest.raises(NotAuthorized, match="made before this daemon began to listen"):
        access.admit(back, sent)


def test_a_proof_is_good_for_one_connection() -> None:
    access, sent = Access(TOKEN), Credential(OWNER, TOKEN).handshake(PORT)
    access.admit(Conn(), sent)
    with pytest.raises(NotAuthorized, match="wrong credential for user 'owner'"):
        access.admit(Conn(), sent)


@pytest.mark.parametrize(
    "handshake, reason",
    [
        ({"user": OWNER, "secret": TOKEN}, "a client older than this broker"),
        (Credential(OWNER, "not-the-token").handshake(PORT), "wrong credential"),
        ({**Credential(OWNER, TOKEN).handshake(PORT), "time": 0.0}, "wrong credential"),
    ],
)
def test_anything_but_a_fresh_proof_of_the_token_is_refused(handshake: dict, reason: str) -> None:
    with pytest.raises(NotAuthorized, match=reason):
        Access(TOKEN).admit(Conn(), handshake)


def test_a_password_is_what_a_user_of_the_users_file_sends() -> None:
    """The broker keeps only an argon2 hash of it: no proof could be checked."""
    alice = Credential("alice", "s3cret")
    assert alice.handshake(PORT) == {"user": "alice", "secret": "s3cret"}
    assert alice.answer_role is None
    assert Credential(OWNER, TOKEN).answer_role == SERVER_ROLE


def test_a_user_at_a_daemon_without_a_users_file_is_told_so() -> None:
    """Not "wrong credential" (the password was right: a name server started without the
    brokers' --users, say)."""
    with pytest.raises(NotAuthorized, match="started without a users file"):
        Access(TOKEN).admit(Conn(), Credential("alice", "right-password").handshake(PORT))
