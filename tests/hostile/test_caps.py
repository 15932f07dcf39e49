"""The caps, each a flag with a typed refusal: channels per broker, bytes queued per
channel, where a push subscriber's callback may be; and every hardening flag on the
command lines that serve."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest

from channel_server.errors import CapacityError, ClientError, QueueFull
from channel_server.wire import make_proxy
from tests.hostile.services import Stack, running_stack
from tests.integration.procs import PROJECT_ROOT, free_port

pytestmark = pytest.mark.hostile
MAX_CHANNELS = 3
MAX_QUEUED_BYTES = 2 * 1024 * 1024
"""The smallest cap the broker takes: one largest event (1 MiB) and its overhead fit."""
PAYLOAD_BYTES = 256 * 1024
BYTES_CHANNEL = "bytes"
ALLOWED_HOST = "127.0.0.2"
"""A loopback address other than the caller's, named in --callback-hosts."""
SERVE_FLAGS = (
    "--max-connections",
    "--comm-timeout",
    "--handshake-timeout",
    "--max-message-bytes",
    "--max-channels",
    "--max-members",
    "--max-queued-bytes",
    "--callback-hosts",
)
NAMESERVER_FLAGS = SERVE_FLAGS[:4]
"""The connection limits apply to a name server as to a broker."""


@pytest.fixture(scope="module")
def stack(hostile_root) -> Iterator[Stack]:
    flags = (
        "--memory",
        "--max-channels",
        str(MAX_CHANNELS),
        "--max-queued-bytes",
        str(MAX_QUEUED_BYTES),
        "--callback-hosts",
        ALLOWED_HOST,
    )
    with running_stack(hostile_root, "caps", *flags, channels=(BYTES_CHANNEL,)) as s:
        yield s


@pytest.mark.parametrize(
    "command, flags", [("serve", SERVE_FLAGS), ("nameserver", NAMESERVER_FLAGS)]
)
def test_the_commands_that_serve_take_every_limit(command: str, flags: tuple[str, ...]) -> None:
    helped = subprocess.run(
        [sys.executable, "-m", "channel_server", command, "--help"],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=PROJECT_ROOT,
    )
    assert helped.returncode == 0, helped.stderr
    missing = [flag for flag in flags if flag not in helped.stdout]
    assert not missing, f"{command} --help does not offer {missing}"


def test_channels_past_the_cap_get_limit_reached(stack: Stack) -> None:
    with make_proxy(stack.broker_uri, 10.0) as broker:
        hosted = len(broker.channels())
        for n in range(MAX_CHANNELS - hosted):
            broker.create_channel(f"extra-{n}")
        with pytest.raises(CapacityError) as refused:
            broker.create_channel("one-too-many")
        assert type(refused.value).__name__ == "LimitReached"
        assert len(broker.channels()) == MAX_CHANNELS


def test_bytes_queued_past_the_cap_get_queue_full(stack: Stack) -> None:
    """Fewer events than --capacity, but more bytes than --max-queued-bytes."""
    uri = stack.channel_uri(BYTES_CHANNEL)
    accepted = 0
    with make_proxy(uri, 10.0) as channel:
        with pytest.raises(QueueFull):
            for n in range(2 * MAX_QUEUED_BYTES // PAYLOAD_BYTES):
                event = {"id": f"b-{n}", "publisher_id": "b", "timestamp": 1.0 + n}
                channel.publish([dict(event, payload="x" * PAYLOAD_BYTES)])
                accepted += 1
        assert accepted * PAYLOAD_BYTES <= MAX_QUEUED_BYTES
        assert channel.stats()["unacked"] == accepted


@pytest.mark.parametrize("host", ["192.0.2.1", "10.255.255.1"])
def test_a_callback_elsewhere_is_refused(stack: Stack, host: str) -> None:
    """A callback must be on the subscriber's own address or a --callback-hosts one, or
    the broker would connect wherever a caller points it."""
    uri = stack.channel_uri(BYTES_CHANNEL)
    dead = free_port()
    with make_proxy(uri, 10.0) as channel:
        with pytest.raises(ClientError):
            channel.subscribe("elsewhere", f"PYRO:x@{host}:{dead}", None, 10, "s" * 32)
        allowed = channel.subscribe("allowed", f"PYRO:x@{ALLOWED_HOST}:{dead}", None, 10, "s" * 32)
        assert allowed["mode"] == "push"
        members = {m["id"] for g in channel.stats()["groups"].values() for m in g["members"]}
    assert "elsewhere" not in members
