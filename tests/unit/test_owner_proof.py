"""Over the wire the owner proves it knows the local token and the daemon proves it back:
the token itself is never sent, so whatever listens on a broker's or name server's port
before it (a restart, a broker not started yet) learns nothing it can use."""

from __future__ import annotations

import pytest

from channel_server import proofs
from channel_server.access import USER_ATTRIBUTE, Access
from channel_server.credentials import OWNER, SERVER_ROLE, Credential
from channel_server.errors import NotAuthorized

TOKEN = "the-local-token-of-this-user"


class Conn:
    sock = None


def test_the_owner_proves_the_token_and_gets_the_daemons_proof_back() -> None:
    sent = Credential(OWNER, TOKEN).handshake()
    assert TOKEN not in repr(sent)
    conn = Conn()
    answer = Access(TOKEN).admit(conn, sent)
    assert getattr(conn, USER_ATTRIBUTE).name == OWNER
    assert proofs.answer_ok(TOKEN, SERVER_ROLE, sent, answer)
    assert not proofs.answer_ok("another-token", SERVER_ROLE, sent, answer)
    assert not proofs.answer_ok(TOKEN, SERVER_ROLE, sent, "welcome")


def test_a_proof_is_good_for_one_connection() -> None:
    access, sent = Access(TOKEN), Credential(OWNER, TOKEN).handshake()
    access.admit(Conn(), sent)
    with pytest.raises(NotAuthorized, match="wrong credential for user 'owner'"):
        access.admit(Conn(), sent)


@pytest.mark.parametrize(
    "handshake, reason",
    [
        ({"user": OWNER, "secret": TOKEN}, "the token itself was sent"),
        (Credential(OWNER, "not-the-token").handshake(), "wrong credential"),
        ({**Credential(OWNER, TOKEN).handshake(), "time": 0.0}, "wrong credential"),
    ],
)
def test_anything_but_a_fresh_proof_of_the_token_is_refused(handshake: dict, reason: str) -> None:
    with pytest.raises(NotAuthorized, match=reason):
        Access(TOKEN).admit(Conn(), handshake)


def test_a_password_is_what_a_user_of_the_users_file_sends() -> None:
    """The broker keeps only an argon2 hash of it: no proof could be checked."""
    alice = Credential("alice", "s3cret")
    assert alice.handshake() == {"user": "alice", "secret": "s3cret"}
    assert alice.answer_role is None
    assert Credential(OWNER, TOKEN).answer_role == SERVER_ROLE
