"""Certificates for TLS tests, from trustme: one CA, one certificate for 127.0.0.1 and
localhost that every process uses as its server and client certificate, and a stranger
CA's certificate. Import the ``certs`` fixture where it is needed."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
import trustme


@dataclass(frozen=True)
class Certs:
    ca: Path
    cert: Path
    key: Path
    stranger: Path
    """A certificate and key (one file) that another CA signed."""

    @property
    def flags(self) -> tuple[str, ...]:
        return ("--tls-cert", str(self.cert), "--tls-key", str(self.key), "--tls-ca", str(self.ca))


@pytest.fixture
def certs(tmp_path: Path) -> Certs:
    where = tmp_path / "certs"
    where.mkdir()
    ca = trustme.CA()
    leaf = ca.issue_cert("127.0.0.1", "localhost")
    ca.cert_pem.write_to_path(str(where / "ca.pem"))
    leaf.private_key_pem.write_to_path(str(where / "key.pem"))
    for i, pem in enumerate(leaf.cert_chain_pems):
        pem.write_to_path(str(where / "cert.pem"), append=i > 0)
    trustme.CA().issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(
        str(where / "stranger.pem")
    )
    for key in ("key.pem", "stranger.pem"):
        (where / key).chmod(0o600)
    return Certs(where / "ca.pem", where / "cert.pem", where / "key.pem", where / "stranger.pem")
