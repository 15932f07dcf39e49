"""``python -m channel_server users ...``: add, remove and list the users of a broker.

Passwords come from an environment variable, a file or a prompt, never from the command
line (it shows in ``ps`` and shell history); the users file keeps only their argon2 hashes.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
from pathlib import Path
from typing import Any

from channel_client import cli_common as cc
from channel_server.errors import InvalidArgument
from channel_server.users import UsersFile, check_user_name, parse_grant


def add_users_command(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``users`` command (with add / remove / list) to ``subparsers``."""
    users = subparsers.add_parser(
        "users",
        help="add, remove or list the users of a broker (users file)",
        description="Manage a users file: argon2 password hashes and per channel-pattern "
        "grants (publish, subscribe, admin).",
    )
    users.set_defaults(log_level="WARNING")
    sub = users.add_subparsers(dest="users_command", required=True, metavar="ACTION")
    add = sub.add_parser(
        "add",
        help="add a user (or replace one with --replace)",
        description="Add a user. The password is read from --password-env, "
        "--password-file, or prompted for twice; never give it on the command line.",
    )
    add.add_argument("name", help="user name: 1-64 characters of [A-Za-z0-9._-]")
    _add_file_flag(add)
    add.add_argument(
        "--allow",
        action="append",
        required=True,
        metavar="ACTIONS:PATTERN",
        help="a grant, e.g. publish,subscribe:orders* or admin:* (repeatable); actions "
        "are publish, subscribe, admin (admin implies the other two)",
    )
    source = add.add_mutually_exclusive_group()
    source.add_argument("--password-env", metavar="VAR", help="read it from $VAR")
    source.add_argument(
        "--password-file", type=Path, metavar="FILE", help="read it from FILE's first line"
    )
    add.add_argument("--replace", action="store_true", help="overwrite an existing user")
    remove = sub.add_parser("remove", help="remove a user")
    remove.add_argument("name", help="user name")
    _add_file_flag(remove)
    listing = sub.add_parser("list", help="user names and grants (never the hashes)")
    _add_file_flag(listing)
    listing.add_argument("--json", action="store_true", help="print a JSON list instead")
    return users


def _add_file_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--file", type=Path, required=True, metavar="USERS.yaml", help="the users file"
    )


def run_users(args: argparse.Namespace) -> int:
    """Run ``users add|remove|list``: 0 when done, 2 (with a one-line reason) on bad input."""
    try:
        return _COMMANDS[args.users_command](args)
    except (InvalidArgument, ValueError, OSError) as exc:
        return cc.fail(str(exc), cc.EXIT_USAGE)
    except (EOFError, KeyboardInterrupt):
        return cc.fail("no password given", cc.EXIT_USAGE)


def _add(args: argparse.Namespace) -> int:
    check_user_name(args.name)
    grants = [parse_grant(text) for text in args.allow]
    users = UsersFile.load(args.file) if args.file.exists() else UsersFile()
    if args.name in users.names() and not args.replace:
        raise ValueError(f"user {args.name!r} already exists in {args.file} (use --replace)")
    users.add(args.name, _password(args), grants, replace=args.replace)
    users.save(args.file)
    return cc.EXIT_OK


def _remove(args: argparse.Namespace) -> int:
    users = UsersFile.load(args.file)
    users.remove(args.name)
    users.save(args.file)
    return cc.EXIT_OK


def _list(args: argparse.Namespace) -> int:
    users = UsersFile.load(args.file)
    if args.json:
        rows = [{"name": u.name, "allow": [g.to_dict() for g in u.grants]} for u in users.users()]
        print(json.dumps(rows, indent=2))
    else:
        for user in users.users():
            print(user.name, *map(str, user.grants))
    return cc.EXIT_OK


def _password(args: argparse.Namespace) -> str:
    """The new password from --password-env, --password-file or two prompts."""
    if args.password_env:
        password = os.environ.get(args.password_env, "")
        if not password:
            raise ValueError(f"environment variable {args.password_env} is unset or empty")
        return password
    if args.password_file:
        lines = args.password_file.read_text(encoding="utf-8").splitlines()
        if not lines or not lines[0]:
            raise ValueError(f"{args.password_file}: first line (the password) is empty")
        return lines[0]
    password = getpass.getpass(f"password for {args.name}: ")
    if password != getpass.getpass("again: "):
        raise ValueError("the passwords differ")
    return password


_COMMANDS = {"add": _add, "remove": _remove, "list": _list}
