"""``serve``'s flags of the HTTP monitor, and the HttpConfig they make."""

from __future__ import annotations

import argparse
import dataclasses
import logging

from channel_client import cli_common as cc
from channel_server import tls
from channel_server.errors import InvalidArgument
from channel_server.monitor.settings import BadAddress, HttpConfig, parse_address


def http_address(text: str) -> str:
    """argparse type of ``--http``: checked as HOST:PORT, kept as written (the config
    file and ``--print-config`` show it so)."""
    try:
        parse_address(text)
    except BadAddress as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text.strip()


def add_http_flags(parser: argparse.ArgumentParser) -> None:
    d = HttpConfig()
    group = parser.add_argument_group("HTTP monitor (metrics, JSON API, live page)")
    group.add_argument(
        "--http",
        type=http_address,
        default=None,
        metavar="HOST:PORT",
        help="serve Prometheus /metrics, the JSON API /api/channels and a live page at / "
        "on this address (PORT 0: any free one), for callers with the broker's credentials "
        "(HTTP Basic: a user and password of --users, or owner and the monitor token, in "
        "the state dir's monitor-token file; or Bearer with the monitor token); HTTPS "
        "with the broker's --tls-cert/--tls-key, else plain HTTP, "
        "where a non-loopback HOST needs --insecure; default: off",
    )
    cc.add_count_flag(
        group,
        "--http-max-connections",
        d.max_connections,
        "HTTP requests served at once, a thread each; one more gets 503",
    )
    cc.add_count_flag(
        group,
        "--http-max-waiting",
        d.max_waiting,
        "HTTP connections still sending their request (no thread each); the oldest is "
        "closed past this",
    )
    group.add_argument(
        "--http-timeout",
        type=cc.positive_float,
        default=d.request_timeout_s,
        metavar="S",
        help="seconds an HTTP client has to send its request, and each send or receive may "
        "take (default %(default)s)",
    )


def http_from_args(args: argparse.Namespace) -> HttpConfig | None:
    """The monitor's config, or None without ``--http``. With the broker's TLS certificate
    (``--tls-cert``/``--tls-key`` or their env vars) it speaks HTTPS; without, a
    non-loopback address needs ``--insecure`` (the broker's own bind rule)."""
    if args.http is None:
        return None
    host, port = parse_address(args.http)
    config = HttpConfig(
        host=host,
        port=port,
        max_connections=args.http_max_connections,
        max_waiting=args.http_max_waiting,
        request_timeout_s=args.http_timeout,
    )
    options = tls.from_args(args)
    if options.cert is not None and options.key is not None:
        return dataclasses.replace(config, cert=str(options.cert), key=str(options.key))
    if not cc.is_loopback(host):
        if not args.insecure:
            raise InvalidArgument(
                "--http",
                f"{host} is not a loopback address: credentials would cross the network in "
                "clear text (the monitor speaks plain HTTP); give --insecure to allow it",
            )
        logging.getLogger(__name__).warning(
            "--http %s without TLS (--insecure): credentials cross the network in clear text",
            host,
        )
    return config


WATCH_INTERVAL_S = 2.0


def add_watch_flags(parser: argparse.ArgumentParser) -> None:
    """``status --watch [--interval S]``."""
    parser.add_argument(
        "--watch",
        action="store_true",
        help="keep the tables on screen, refreshed in place, until Ctrl-C",
    )
    parser.add_argument(
        "--interval",
        type=cc.positive_float,
        default=WATCH_INTERVAL_S,
        metavar="S",
        help="seconds between refreshes with --watch (default %(default)s)",
    )
