"""TLS between real processes: mutual TLS end to end, refused clients, public binds.

Certificates come from trustme: one CA, one certificate for 127.0.0.1 and localhost that
every process uses as its server and client certificate, and a stranger CA's certificate.
The test process itself never turns TLS on (Pyro5's SSL switch is per process).
"""

from __future__ import annotations

import contextlib
import re
import socket
import threading

import pytest

from channel_client.cli_common import EXIT_NOT_AUTHORIZED, EXIT_OK, EXIT_USAGE
from channel_server.tls import CA_ENV, CERT_ENV, KEY_ENV
from tests.integration.procs import Cluster
from tests.integration.tls_certs import Certs

pytestmark = pytest.mark.integration


def publish(cluster: Cluster, pub_id: str, count: int, *extra: str) -> list[str]:
    return [
        "-m", "publisher", "publish", *cluster.ns, "--channel", "c1",
        "--id", pub_id, "--count", str(count), *extra,
    ]  # fmt: skip


def one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    return lines[0]


def test_mutual_tls_end_to_end(
    cluster: Cluster, certs: Certs, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Broker (and its embedded name server) and subscriber take the flags, the publisher
    the environment: 20 events arrive, each once."""
    broker = cluster.broker("c1", extra=("--memory", *certs.flags))
    sub = cluster.subscriber("c1", "s1", "--quiet", *certs.flags)
    monkeypatch.setenv(CERT_ENV, str(certs.cert))
    monkeypatch.setenv(KEY_ENV, str(certs.key))
    monkeypatch.setenv(CA_ENV, str(certs.ca))
    result = cluster.run(publish(cluster, "P", 20))
    assert result.returncode == EXIT_OK, result.stderr
    assert "20 accepted" in result.stdout
    records = cluster.wait_for_records("c1", ("s1",), 20)["s1"]
    assert sorted(r["id"] for r in records) == sorted(f"P-{n}" for n in range(1, 21))
    assert broker.alive and sub.alive


def test_refused_clients_get_one_line_and_the_broker_keeps_serving(
    cluster: Cluster, certs: Certs
) -> None:
    broker = cluster.broker("c1", extra=("--memory", *certs.flags))
    cluster.subscriber("c1", "s1", "--quiet", *certs.flags)
    cert_only = ("--tls-cert", str(certs.cert), "--tls-key", str(certs.key))
    stranger = ("--tls-cert", str(certs.stranger), "--tls-key", str(certs.stranger))
    cases = {
        "no TLS at all": ((), "this daemon accepts TLS connections only"),
        "no CA": (cert_only, "the certificate of 127.0.0.1 is not trusted"),
        "a CA but no certificate": (
            ("--tls-ca", str(certs.ca)),
            "127.0.0.1 refused this process's certificate",
        ),
        "another CA's certificate": (
            (*stranger, "--tls-ca", str(certs.ca)),
            "127.0.0.1 refused this process's certificate",
        ),
    }
    for case, (flags, reason) in cases.items():
        result = cluster.run(publish(cluster, "REFUSED", 1, *flags), timeout_s=20)
        assert result.returncode == EXIT_NOT_AUTHORIZED, (case, result.stderr)
        line = one_line(result.stderr)
        assert line.startswith("error: not authorized: TLS: "), (case, line)
        assert reason in line, (case, line)
    broker.wait_for(r"WARNING channel_server\.tls: refused a plain-text connection")
    assert broker.alive
    result = cluster.run(publish(cluster, "P", 3, *certs.flags))
    assert result.returncode == EXIT_OK, result.stderr
    records = cluster.wait_for_records("c1", ("s1",), 3)["s1"]
    assert {r["publisher_id"] for r in records} == {"P"}


def test_a_silent_connection_does_not_stall_a_tls_daemon(cluster: Cluster, certs: Certs) -> None:
    """Pyro5 would run the TLS handshake in its accept loop, with no timeout: one peer
    that connects and says nothing would freeze the daemon for everyone."""
    cluster.broker("c1", extra=("--memory", *certs.flags))
    with (
        socket.create_connection(("127.0.0.1", cluster.ns_port)) as silent,
        socket.create_connection(("127.0.0.1", cluster.ns_port)) as half,
    ):
        half.sendall(b"PY")  # half of a plain Pyro header, then nothing
        result = cluster.run(publish(cluster, "P", 1, *certs.flags), timeout_s=20)
        assert silent.fileno() >= 0
    assert result.returncode == EXIT_OK, result.stderr
    assert "1 accepted" in result.stdout


TRICKLERS = 24
TRICKLE_EVERY_S = 0.5


def test_trickled_tls_handshakes_hold_no_worker_and_lock_nobody_out(
    cluster: Cluster, certs: Certs
) -> None:
    """Strangers with no certificate open more sockets than the daemon has workers, each
    sending a byte of a TLS handshake: the handshakes wait in the lobby, not on workers,
    so a client with a certificate still gets through."""
    cluster.broker("c1", extra=("--memory", "--max-connections", "8", *certs.flags))
    tricklers = [socket.create_connection(("127.0.0.1", cluster.ns_port)) for _ in range(TRICKLERS)]
    done = threading.Event()

    def trickle() -> None:  # a TLS record header of 512 bytes, then a byte at a time
        for sock in tricklers:
            sock.sendall(b"\x16\x03\x01\x02\x00")
        while not done.wait(TRICKLE_EVERY_S):
            for sock in tricklers:
                with contextlib.suppress(OSError):  # closed by the daemon's deadline
                    sock.sendall(b"\x00")

    trickling = threading.Thread(target=trickle, daemon=True)
    trickling.start()
    try:  # at the first try: a busy refusal would not be retried
        result = cluster.run(publish(cluster, "P", 1, "--retry-for", "0", *certs.flags))
    finally:
        done.set()
        trickling.join(5)
        for sock in tricklers:
            sock.close()
    assert result.returncode == EXIT_OK, result.stderr
    assert "1 accepted" in result.stdout


@pytest.mark.parametrize(
    "argv,flag",
    [
        (["-m", "channel_server", "serve", "--memory", "--host", "0.0.0.0"], "--host"),
        (["-m", "channel_server", "serve", "--memory", "--ns-host", "10.1.2.3"], "--ns-host"),
        (["-m", "channel_server", "nameserver", "--ns-host", "0.0.0.0"], "--ns-host"),
        (["-m", "subscriber", "run", "--channel", "c", "--id", "s", "--host", "::"], "--host"),
    ],
    ids=lambda a: " ".join(a[1:3]) if isinstance(a, list) else a,
)
def test_a_public_bind_without_tls_is_refused(cluster: Cluster, argv: list[str], flag: str):
    result = cluster.run([*argv, "--ns-port", str(cluster.ns_port)], timeout_s=20)
    assert result.returncode == EXIT_USAGE
    line = one_line(result.stderr)
    assert re.fullmatch(
        rf"error: {flag}: \S+ is not a loopback address and TLS is off: credentials would "
        r"cross the network in clear text; give --tls-cert/--tls-key, or --insecure",
        line,
    ), line


def test_insecure_lets_a_broker_bind_everywhere(cluster: Cluster) -> None:
    everywhere = ("--host", "0.0.0.0", "--advertise", "127.0.0.1", "--insecure")
    broker = cluster.broker("c1", extra=("--memory", *everywhere))
    assert broker.count(r"WARNING .*--host 0\.0\.0\.0 without TLS \(--insecure\)") == 1
    assert broker.terminate() == EXIT_OK


@pytest.mark.parametrize(
    "extra,reason",
    [
        (("--tls-cert", "{cert}"), "--tls-cert and --tls-key go together"),
        (("--tls-ca", "{ca}"), "a process that serves needs --tls-cert and --tls-key"),
        (("--tls-cert", "{cert}", "--tls-key", "{ca}"), "are not a PEM certificate"),
        (("--tls-cert", "{cert}", "--tls-key", "{key}", "--tls-ca", "/nope"), "/nope: cannot"),
    ],
    ids=["cert without key", "ca only", "not a key", "missing ca"],
)
def test_tls_flags_that_cannot_work_are_one_line(
    cluster: Cluster, certs: Certs, extra: tuple[str, ...], reason: str
) -> None:
    files = {"cert": certs.cert, "key": certs.key, "ca": certs.ca}
    flags = [flag.format(**files) for flag in extra]
    argv = ["-m", "channel_server", "serve", "--memory", *cluster.ns, *flags]
    result = cluster.run(argv, timeout_s=20)
    assert result.returncode == EXIT_USAGE
    line = one_line(result.stderr)
    assert line.startswith("error: tls: ") and reason in line, line


def test_the_monitor_of_a_tls_broker_speaks_https(cluster: Cluster, certs: Certs) -> None:
    """The broker's certificate serves its HTTP monitor too: HTTPS, on any address."""
    import http.client
    import ssl

    from channel_server.credentials import read_monitor_token
    from tests.integration.procs import free_port

    port = free_port()
    broker = cluster.broker("c1", extra=("--memory", *certs.flags, "--http", f"127.0.0.1:{port}"))
    assert f"; http https://127.0.0.1:{port}/" in broker.output()
    context = ssl.create_default_context(cafile=str(certs.ca))
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=5)
    token = read_monitor_token(cluster.tmp / "state")
    conn.request("GET", "/api/channels", headers={"Authorization": f"Bearer {token}"})
    reply = conn.getresponse()
    assert reply.status == 200 and b'"channel": "c1"' in reply.read()
    conn.close()
