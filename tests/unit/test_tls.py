"""TlsOptions: which certificate files work together, and the Pyro5 config they set."""

from __future__ import annotations

import argparse
import logging
import re
from dataclasses import dataclass
from pathlib import Path

import Pyro5
import Pyro5.socketutil
import pytest
import trustme
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import load_pem_private_key

from channel_client import cli_common
from channel_server import tls, tls_sockets
from channel_server.errors import InvalidArgument
from channel_server.tls import TlsOptions

SSL_ITEMS = (
    "SSL",
    "SSL_SERVERCERT",
    "SSL_SERVERKEY",
    "SSL_REQUIRECLIENTCERT",
    "SSL_CLIENTCERT",
    "SSL_CLIENTKEY",
    "SSL_CACERTS",
)


@dataclass(frozen=True)
class Files:
    ca: Path
    cert: Path
    key: Path
    other_key: Path
    encrypted_key: Path
    junk: Path


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Files:
    where = tmp_path_factory.mktemp("tls")
    ca = trustme.CA()
    leaf = ca.issue_cert("127.0.0.1", "localhost")
    other = ca.issue_cert("localhost")
    ca.cert_pem.write_to_path(str(where / "ca.pem"))
    leaf.cert_chain_pems[0].write_to_path(str(where / "cert.pem"))
    leaf.private_key_pem.write_to_path(str(where / "key.pem"))
    other.private_key_pem.write_to_path(str(where / "other-key.pem"))
    key = load_pem_private_key(leaf.private_key_pem.bytes(), None)
    (where / "encrypted-key.pem").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"secret"),
        )
    )
    (where / "junk.pem").write_text("not a certificate\n")
    return Files(
        where / "ca.pem",
        where / "cert.pem",
        where / "key.pem",
        where / "other-key.pem",
        where / "encrypted-key.pem",
        where / "junk.pem",
    )


@pytest.fixture
def pyro_config(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pyro5's config, its SSL context factory and what tls applied are process-global:
    each is put back after the test."""
    for name in SSL_ITEMS:
        monkeypatch.setattr(Pyro5.config, name, getattr(Pyro5.config, name))
    monkeypatch.setattr(Pyro5.socketutil, "get_ssl_context", Pyro5.socketutil.get_ssl_context)
    monkeypatch.setattr(tls, "_applied", None)


def pyro_ssl_config() -> dict[str, object]:
    return {name: getattr(Pyro5.config, name) for name in SSL_ITEMS}


# -- validate ------------------------------------------------------------------------------
def test_nothing_given_is_tls_off() -> None:
    options = TlsOptions()
    assert not options.enabled
    assert options.validate(serving=True) is options
    assert options.pyro_settings() == {}


def test_a_server_with_cert_key_and_ca_is_valid(files: Files) -> None:
    options = TlsOptions(files.cert, files.key, files.ca)
    assert options.enabled and options.mutual
    assert options.validate(serving=True) is options


def test_a_ca_alone_is_fine_for_a_client(files: Files) -> None:
    options = TlsOptions(ca=files.ca)
    assert options.validate(serving=False).enabled


def test_a_server_needs_cert_and_key(files: Files) -> None:
    with pytest.raises(InvalidArgument, match="serves needs --tls-cert and --tls-key"):
        TlsOptions(ca=files.ca).validate(serving=True)


@pytest.mark.parametrize("given", ["cert", "key"])
def test_cert_and_key_go_together(files: Files, given: str) -> None:
    options = TlsOptions(**{given: getattr(files, given)}, ca=files.ca)
    with pytest.raises(InvalidArgument, match="--tls-cert and --tls-key go together"):
        options.validate()


def test_an_unreadable_file_is_named(files: Files, tmp_path: Path) -> None:
    missing = tmp_path / "missing.pem"
    with pytest.raises(InvalidArgument, match=re.escape(f"{missing}: cannot read it")):
        TlsOptions(ca=missing).validate()
    with pytest.raises(InvalidArgument, match=re.escape(f"{missing}: cannot read it")):
        TlsOptions(files.cert, missing).validate()


@pytest.mark.parametrize(
    "key_name,reason",
    [("other_key", "KEY_VALUES_MISMATCH"), ("encrypted_key", "the key is encrypted")],
)
def test_a_key_that_does_not_fit_is_refused(files: Files, key_name: str, reason: str) -> None:
    with pytest.raises(InvalidArgument, match=reason) as info:
        TlsOptions(files.cert, getattr(files, key_name)).validate(serving=True)
    assert "\n" not in str(info.value)


def test_a_ca_file_that_is_not_pem_is_refused(files: Files) -> None:
    with pytest.raises(InvalidArgument, match="not PEM CA certificates"):
        TlsOptions(ca=files.junk).validate()


# -- from_args / from_env ---------------------------------------------------------------------
def test_flags_win_over_env_and_env_fills_the_rest(files: Files) -> None:
    env = {tls.CERT_ENV: "/env/cert.pem", tls.KEY_ENV: "/env/key.pem", tls.CA_ENV: ""}
    args = argparse.Namespace(tls_cert=files.cert, tls_key=None, tls_ca=None)
    assert tls.from_args(args, env) == TlsOptions(files.cert, Path("/env/key.pem"), None)
    assert tls.from_env({}) == TlsOptions()
    assert tls.from_args(argparse.Namespace(), {tls.CA_ENV: str(files.ca)}) == TlsOptions(
        ca=files.ca
    )


# -- apply ------------------------------------------------------------------------------------
@pytest.mark.usefixtures("pyro_config")
def test_apply_sets_pyro5_ssl_config_for_mutual_tls(files: Files) -> None:
    TlsOptions(files.cert, files.key, files.ca).apply()
    assert pyro_ssl_config() == {
        "SSL": True,
        "SSL_SERVERCERT": str(files.cert),
        "SSL_SERVERKEY": str(files.key),
        "SSL_REQUIRECLIENTCERT": True,
        "SSL_CLIENTCERT": str(files.cert),
        "SSL_CLIENTKEY": str(files.key),
        "SSL_CACERTS": str(files.ca),
    }
    assert getattr(Pyro5.socketutil.get_ssl_context, "pubsub_sockets", False)


@pytest.mark.usefixtures("pyro_config")
def test_apply_without_a_ca_is_one_way_tls(files: Files) -> None:
    TlsOptions(files.cert, files.key).apply()
    config = pyro_ssl_config()
    assert config["SSL"] is True
    assert config["SSL_SERVERCERT"] == str(files.cert)
    assert not config["SSL_CACERTS"]
    assert config["SSL_REQUIRECLIENTCERT"] is False


@pytest.mark.usefixtures("pyro_config")
def test_apply_with_tls_off_changes_nothing() -> None:
    before = pyro_ssl_config()
    TlsOptions().apply()
    assert pyro_ssl_config() == before


@pytest.mark.usefixtures("pyro_config")
def test_apply_is_once_per_process(files: Files) -> None:
    options = TlsOptions(files.cert, files.key, files.ca)
    options.apply()
    options.apply()  # the same again: nothing to do
    with pytest.raises(RuntimeError, match="already set up"):
        TlsOptions(ca=files.ca).apply()


@pytest.mark.usefixtures("pyro_config")
def test_the_contexts_pyro5_builds_get_our_sockets(files: Files, monkeypatch) -> None:
    monkeypatch.setattr(Pyro5.socketutil, "__ssl_client_context", None)
    TlsOptions(ca=files.ca).apply()
    context = Pyro5.socketutil.get_ssl_context(cacerts=str(files.ca))
    assert context.sslsocket_class is tls_sockets.PyroTlsSocket


# -- the bind check of cli_common.setup ---------------------------------------------------------
@pytest.mark.parametrize(
    "host,loopback",
    [
        ("127.0.0.1", True),
        ("127.8.9.10", True),
        ("::1", True),
        ("localhost", True),
        ("LocalHost.", True),
        ("0.0.0.0", False),
        ("::", False),
        ("10.0.0.5", False),
        ("", False),
        ("broker.example.com", False),
    ],
)
def test_is_loopback(host: str, loopback: bool) -> None:
    assert cli_common.is_loopback(host) is loopback


def bind_args(host: str, insecure: bool = False, **tls_flags: Path) -> argparse.Namespace:
    return argparse.Namespace(host=host, insecure=insecure, bind_dests=("host",), **tls_flags)


@pytest.fixture
def no_tls_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (tls.CERT_ENV, tls.KEY_ENV, tls.CA_ENV):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.usefixtures("no_tls_env")
def test_a_public_bind_without_tls_is_refused() -> None:
    with pytest.raises(
        InvalidArgument, match=re.escape("--host: 0.0.0.0 is not a loopback address")
    ):
        cli_common.setup_tls(bind_args("0.0.0.0"))


@pytest.mark.usefixtures("no_tls_env")
def test_insecure_allows_it_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        assert not cli_common.setup_tls(bind_args("0.0.0.0", insecure=True)).enabled
    assert "without TLS (--insecure)" in caplog.text


@pytest.mark.usefixtures("no_tls_env")
def test_a_loopback_bind_needs_nothing() -> None:
    assert not cli_common.setup_tls(bind_args("127.0.0.1")).enabled


@pytest.mark.usefixtures("no_tls_env", "pyro_config")
def test_a_public_bind_with_tls_is_fine(files: Files) -> None:
    args = bind_args("0.0.0.0", tls_cert=files.cert, tls_key=files.key, tls_ca=files.ca)
    assert cli_common.setup_tls(args).mutual
    assert Pyro5.config.SSL is True


@pytest.mark.usefixtures("no_tls_env")
def test_a_command_that_serves_needs_a_certificate(files: Files) -> None:
    with pytest.raises(InvalidArgument, match="serves needs"):
        cli_common.setup_tls(bind_args("127.0.0.1", tls_ca=files.ca))


def test_a_key_others_can_read_is_warned_about(
    files: Files, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    key = tmp_path / "key.pem"
    key.write_bytes(files.key.read_bytes())
    key.chmod(0o600)
    with caplog.at_level(logging.WARNING):
        TlsOptions(files.cert, key).validate(serving=True)
        assert "readable by other users" not in caplog.text
        key.chmod(0o644)
        TlsOptions(files.cert, key).validate(serving=True)
    assert f"{key} is readable by other users" in caplog.text
