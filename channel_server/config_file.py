"""A TOML file of a command's flags (``serve --config FILE.toml``), and the same as text.

Twenty-odd flags do not fit a command line that people keep in a unit file. A key of the
file is a long flag of the command, spelled with ``-`` or ``_`` (``ack-timeout`` or
``ack_timeout``); its value is what the flag would take: a number or a string (checked by
the flag's own argparse type, so the file cannot hold what the command line would refuse),
``true``/``false`` for a switch, an array for a repeatable flag. The values become the
parser's defaults, so a flag given on the command line overrides the file (a repeatable
one adds to it, and one of two exclusive flags, ``--memory`` or ``--data-dir``, replaces
the other). Relative paths are relative to the working directory, as on the command line.
An unknown key or a wrong value is refused with one line naming the file and the key.
"""

from __future__ import annotations

import argparse
import json
import re
import textwrap
import tomllib
from pathlib import Path
from typing import Any

from channel_server.errors import InvalidArgument

NOT_IN_FILE = frozenset({"help", "config", "print_config", "traceback"})
"""Destinations of flags that make no sense in the file itself."""
COMMENT_WIDTH = 90
_DEFAULT_NOTE = re.compile(r" ?\(default %\(default\)s\)")
"""Said by the value under the comment."""


def reparse(
    parser: argparse.ArgumentParser, argv: list[str] | None, args: argparse.Namespace, path: Path
) -> argparse.Namespace:
    """``args`` (parsed from ``argv`` alone) with the settings of the file at ``path``
    under them: the file's values become the subcommand's defaults and ``argv`` is parsed
    again. Raises InvalidArgument naming the file (and the key)."""
    command = subcommand(parser, args.command)
    values = read(path, command)
    for group in command._mutually_exclusive_groups:
        actions = group._group_actions
        named = [a for a in actions if a.dest in values and values[a.dest] != a.default]
        if len(named) > 1:
            keys = " and ".join(_key(a) for a in named)
            raise InvalidArgument(f"{path}: {_key(named[1])}", f"{keys} exclude each other")
        if any(getattr(args, a.dest) != a.default for a in actions):  # the command line chose
            for action in actions:
                values.pop(action.dest, None)
    command.set_defaults(**values)
    return parser.parse_args(argv)


def subcommand(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    """The parser of one subcommand of ``parser``."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices[name]
    raise KeyError(name)


def read(path: Path, parser: argparse.ArgumentParser) -> dict[str, Any]:
    """The file's settings as ``{dest: value}`` of ``parser``'s flags, converted as the
    command line would convert them. Raises InvalidArgument naming the file and the key."""
    try:
        with path.open("rb") as file:
            data = tomllib.load(file)
    except OSError as exc:
        raise InvalidArgument(str(path), f"cannot read it: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise InvalidArgument(str(path), f"not valid TOML: {exc}") from None
    flags = {_key(action): action for action in settable(parser)}
    values: dict[str, Any] = {}
    keys: dict[str, str] = {}
    for key, value in data.items():
        action = flags.get(key.replace("_", "-"))
        where = f"{path}: {key}"
        if action is None:
            raise InvalidArgument(where, "unknown key (the keys are the long flags of --help)")
        if action.dest in keys:
            raise InvalidArgument(where, f"given twice ({keys[action.dest]} and {key})")
        keys[action.dest] = key
        try:
            values[action.dest] = _convert(action, value)
        except (argparse.ArgumentTypeError, ValueError, TypeError) as exc:
            raise InvalidArgument(where, str(exc)) from None
    return values


def settable(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The flags of ``parser`` a file may set, in --help order."""
    return [
        action
        for action in parser._actions
        if action.dest not in NOT_IN_FILE and any(o.startswith("--") for o in action.option_strings)
    ]


def _key(action: argparse.Action) -> str:
    return next(o for o in action.option_strings if o.startswith("--"))[2:]


def _convert(action: argparse.Action, value: Any) -> Any:
    if action.nargs == 0:  # a switch: --memory, --insecure
        if type(value) is not bool:
            raise TypeError(f"must be true or false, not {_kind(value)}")
        return action.const if value else action.default
    if isinstance(action, argparse._AppendAction):
        if type(value) is not list:
            raise TypeError(f"must be an array of what --{_key(action)} takes, not {_kind(value)}")
        return [_scalar(action, item) for item in value]
    return _scalar(action, value)


def _scalar(action: argparse.Action, value: Any) -> Any:
    """One value, as the flag would take its text."""
    if type(value) is bool or not isinstance(value, str | int | float):
        raise TypeError(f"must be a number or a string, not {_kind(value)}")
    text = value if isinstance(value, str) else repr(value)
    converted = action.type(text) if callable(action.type) else text
    if action.choices is not None and converted not in action.choices:
        raise ValueError(f"must be one of {', '.join(map(str, action.choices))}, not {text!r}")
    return converted


def _kind(value: Any) -> str:
    if type(value) is bool:
        return "a boolean"
    names: dict[type, str] = {dict: "a table", list: "an array", str: "a string"}
    return names.get(type(value), type(value).__name__)


def to_toml(parser: argparse.ArgumentParser, values: argparse.Namespace | None, title: str) -> str:
    """A TOML file of every flag ``parser`` takes, each with its --help as a comment:
    with the defaults when ``values`` is None (the documented example), or with the values
    in effect. A flag without a value is shown commented out, with a placeholder."""
    lines = [f"# {line}" for line in title.splitlines()]
    for action in settable(parser):
        value = action.default if values is None else getattr(values, action.dest)
        text = _DEFAULT_NOTE.sub("", action.help or "") % dict(vars(action), prog=parser.prog)
        lines.append("")
        lines.extend(_comment(text))
        if value is None or value == ():
            placeholder = action.metavar or action.dest.upper()
            lines.append(f"# {_key(action)} = {json.dumps(placeholder)}")
        else:
            lines.append(f"{_key(action)} = {_toml_value(value)}")
    return "\n".join(lines) + "\n"


def _comment(text: str) -> list[str]:
    return textwrap.wrap(text, COMMENT_WIDTH, initial_indent="# ", subsequent_indent="# ")


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(map(_toml_value, value)) + "]"
    if isinstance(value, tuple):  # a comma-separated flag: --callback-hosts a,b
        return json.dumps(",".join(map(str, value)))
    return json.dumps(str(value))
