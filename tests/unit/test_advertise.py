"""Issue 14: --advertise HOST, the host a broker's URIs name in the name server. It must
be a host a client can connect to, and binding to every interface (0.0.0.0, ::) needs
one, since the bind address itself is no address to connect to."""

from __future__ import annotations

import argparse

import pytest

from channel_client import cli_common as cc
from channel_server import cli
from channel_server.errors import InvalidArgument


@pytest.mark.parametrize(
    "text,host",
    [
        ("broker.example.com", "broker.example.com"),
        ("localhost", "localhost"),
        ("10.1.2.3", "10.1.2.3"),
        ("::1", "[::1]"),
        ("[fe80::1]", "[fe80::1]"),
    ],
)
def test_an_advertised_host_is_a_name_or_an_address(text: str, host: str) -> None:
    assert cc.host_name(text) == host


@pytest.mark.parametrize("text", ["0.0.0.0", "::", "", "bad host", "h:9090", "a..b", "-x"])
def test_an_advertised_host_that_no_client_can_use_is_refused(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        cc.host_name(text)


def test_binding_everywhere_needs_an_advertised_host() -> None:
    with pytest.raises(InvalidArgument, match=r"--advertise: --host 0\.0\.0\.0 listens on every"):
        cli.config_from_args(cli.build_parser().parse_args(["serve", "--host", "0.0.0.0"]))
    args = cli.build_parser().parse_args(["serve", "--host", "::", "--advertise", "b1.lan"])
    config = cli.config_from_args(args)
    assert (config.host, config.advertise) == ("::", "b1.lan")
