"""Choosing the PostgreSQL store from the command line: its DSN, where it comes from, and
how it is shown (never with its password). No psycopg here: the flags parse without it."""

from __future__ import annotations

import argparse
import logging
import os
from urllib.parse import urlsplit

log = logging.getLogger("channel_server.store")
STORE_DSN_ENV = "CHANNELS_STORE_DSN"
"""Where --store is read from when not given (keeps the password off the command line)."""
STORE_SCHEMES = ("postgresql://", "postgres://")


def postgres_dsn(text: str) -> str:
    """--store's value: a PostgreSQL URI (the message never repeats it: it may hold a
    password)."""
    if not text.startswith(STORE_SCHEMES):
        raise argparse.ArgumentTypeError("must be a postgresql://user@host:port/db URI")
    return text


def store_dsn(args: argparse.Namespace) -> str | None:
    """The PostgreSQL store's DSN: --store, else the environment's unless --data-dir or
    --memory chose another store; None: SQLite (or memory)."""
    if args.store and urlsplit(args.store).password is not None:
        log.warning(
            "--store carries a password, which other local users can read in the process "
            "list: give the DSN in %s, or the password in PGPASSWORD or ~/.pgpass",
            STORE_DSN_ENV,
        )
    if args.store or args.memory or args.data_dir is not None:
        return args.store
    return os.environ.get(STORE_DSN_ENV) or None


def without_password(args: argparse.Namespace) -> argparse.Namespace:
    """The flags with --store's password left out (what --print-config shows)."""
    if not args.store:
        return args
    parts = urlsplit(args.store)
    if parts.password is None:
        return args
    host = parts.netloc.rsplit("@", 1)[1]
    user = f"{parts.username}@" if parts.username else ""
    shown = parts._replace(netloc=user + host).geturl()
    return argparse.Namespace(**{**vars(args), "store": shown})


def describe(dsn: str) -> str:
    """The DSN without its password, for messages."""
    try:
        from psycopg.conninfo import conninfo_to_dict

        parts = conninfo_to_dict(dsn)
    except Exception:
        return "postgresql"
    user = f"{parts['user']}@" if parts.get("user") else ""
    host, port = parts.get("host", ""), parts.get("port", "")
    return f"postgresql://{user}{host}{':' if port else ''}{port}/{parts.get('dbname', '')}"
