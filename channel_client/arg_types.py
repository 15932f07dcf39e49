"""argparse types: numbers, ports, host and channel names, checked when the command line is
parsed (before any state file is opened or connection made)."""

from __future__ import annotations

import argparse
import ipaddress
import re
from collections.abc import Callable
from typing import Any

from channel_server.errors import InvalidArgument
from channel_server.wire import check_name


def positive_int(text: str) -> int:
    return _bounded(int, text, 1)


def non_negative_int(text: str) -> int:
    return _bounded(int, text, 0)


def non_negative_float(text: str) -> float:
    return _bounded(float, text, 0.0)


def positive_float(text: str) -> float:
    value = _bounded(float, text, 0.0)
    if value == 0:
        raise argparse.ArgumentTypeError(f"must be greater than 0, got {text!r}")
    return value


def port_number(text: str) -> int:
    value = _bounded(int, text, 0)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"must be a port number 0-65535, got {text!r}")
    return value


HOST_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9-]{0,62})(\.[A-Za-z0-9]([A-Za-z0-9-]{0,62}))*\.?")
"""A DNS host name (labels of letters, digits and hyphens)."""


def host_name(text: str) -> str:
    """argparse type of a host clients connect to: a DNS name or an IP address that is not
    the unspecified one (0.0.0.0, ::); an IPv6 address comes back in brackets, as a URI
    names it."""
    host = text.strip().strip("[]")
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        if len(host) > 253 or not HOST_NAME.fullmatch(host):
            raise argparse.ArgumentTypeError(f"not a host name or IP address: {text!r}") from None
        return host
    if address.is_unspecified:
        raise argparse.ArgumentTypeError(f"{text} is no address a client can connect to")
    return f"[{address}]" if address.version == 6 else str(address)


def is_unspecified(host: str) -> bool:
    """Whether a bind address means every interface (0.0.0.0, ::, or empty)."""
    try:
        return not host or ipaddress.ip_address(host.strip("[]")).is_unspecified
    except ValueError:
        return False


def plain_name(text: str) -> str:
    """argparse type of a channel, group, topic, subscriber or publisher name: checked when
    the command line is parsed, before any state file is opened (names make file names)."""
    try:
        return check_name("name", text)
    except InvalidArgument as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: {exc.reason}") from None


def _bounded(kind: Callable[[str], Any], text: str, low: Any) -> Any:
    try:
        value = kind(text)
    except ValueError:
        what = "an integer" if kind is int else "a number"
        raise argparse.ArgumentTypeError(f"not {what}: {text!r}") from None
    if value != value or value < low:  # NaN or too small
        raise argparse.ArgumentTypeError(f"must be at least {low}, got {text!r}")
    return value


def is_loopback(host: str) -> bool:
    """``localhost`` or a loopback IP address (any other name counts as not loopback)."""
    if host.lower().rstrip(".") == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
