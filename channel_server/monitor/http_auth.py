"""The broker's credentials over HTTP.

The same two kinds as over Pyro5, checked by the same ``Access``: HTTP Basic with a user of
the users file and its password, or with the user ``owner`` and the monitor token as the
password; or ``Authorization: Bearer TOKEN`` with the monitor token (what a Prometheus
``bearer_token_file`` sends: the state dir's ``monitor-token``). The monitor token is
derived from the local token and good for the monitor only: over plain HTTP a credential
crosses the wire as it is, to whoever holds the port while the broker is away. Basic is
what a browser asks for by itself, so the page needs no login form of its own. A password
that passed argon2 once is cached by ``Access``, so a page refreshing every 2 s does not
pay a KDF each time.
"""

from __future__ import annotations

import base64
import binascii

from channel_server.access import Access
from channel_server.credentials import OWNER
from channel_server.errors import NotAuthorized
from channel_server.users import User

NO_CREDENTIAL = (
    "no credential: send HTTP Basic with a user of --users and its password, or "
    "Authorization: Bearer with the monitor token (the monitor-token file beside the "
    "broker's local token)"
)
MAX_HEADER_CHARS = 4096
"""A longer Authorization header is refused unread (no credential is that long)."""


def authenticate(access: Access, header: str | None) -> User:
    """The user of an ``Authorization`` header; NotAuthorized when it is missing,
    malformed or wrong."""
    if not header:
        raise NotAuthorized(NO_CREDENTIAL)
    if len(header) > MAX_HEADER_CHARS:
        raise NotAuthorized("a malformed credential")
    scheme, _, value = header.strip().partition(" ")
    scheme, value = scheme.lower(), value.strip()
    if scheme == "bearer" and value:
        return access.monitor_owner(value)
    if scheme == "basic" and value:
        try:
            text = base64.b64decode(value, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            raise NotAuthorized("a malformed credential") from None
        user, sep, password = text.partition(":")
        if sep and user == OWNER:
            return access.monitor_owner(password)
        if sep:
            return access.authenticate({"user": user, "secret": password}, wait_s=0.0)
    raise NotAuthorized("a malformed credential")
