"""Certificates made at test time: a CA, a server certificate and client certificates.

Tests of TLS (pump and drainer gRPC, HTTP status, MySQL connections) need a small PKI
that nobody has to keep up to date: :func:`make_pki` writes one into a directory in a
few milliseconds (EC P-256 keys, valid from a day ago to a week from now, so clock
skew on a busy machine never makes a fresh certificate "not yet valid").

- ``ca.pem``: a self-signed CA (``CN=tidb-binlog-test-ca``);
- ``server.pem`` / ``server-key.pem``: ``CN=server``, valid for ``127.0.0.1``,
  ``::1`` and ``localhost`` (what every test server listens on), usable as a server
  *and* a client certificate (a pump is a client of the drainer's Cistern too);
- ``client.pem`` / ``client-key.pem``: ``CN=client`` (client only), and any further
  ``clients`` asked for by common name (``cert-allowed-cn`` tests).

Each :class:`TLSFiles` is shaped like ``[security]`` (``ssl_ca``, ``ssl_cert``,
``ssl_key``, and :meth:`TLSFiles.keys` gives the dotted config keys), so it passes
wherever a ``SecurityConfig`` does. Needs the ``cryptography`` package (the ``test``
extra).
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

__all__ = ["TLSFiles", "PKI", "make_pki"]


@dataclass(frozen=True)
class TLSFiles:
    """PEM paths in ``[security]``'s shape; an empty string is an unset key."""

    ssl_ca: str = ""
    ssl_cert: str = ""
    ssl_key: str = ""
    cert_allowed_cn: tuple[str, ...] = ()

    def keys(self, section: str = "security") -> dict[str, object]:
        """Dotted config keys (``{"security.ssl-ca": ...}``) for ``load_*_config``."""
        out: dict[str, object] = {f"{section}.ssl-ca": self.ssl_ca,
                                  f"{section}.ssl-cert": self.ssl_cert,
                                  f"{section}.ssl-key": self.ssl_key}
        if self.cert_allowed_cn:
            out[f"{section}.cert-allowed-cn"] = list(self.cert_allowed_cn)
        return out


@dataclass(frozen=True)
class PKI:
    """What :func:`make_pki` wrote: the server's files, the default client's, and the
    extra clients by common name. ``ca_only`` trusts the CA and presents no certificate."""

    directory: Path
    server: TLSFiles
    client: TLSFiles
    clients: dict[str, TLSFiles]

    @property
    def ca_only(self) -> TLSFiles:
        return TLSFiles(ssl_ca=self.server.ssl_ca)


def make_pki(directory: str | Path, clients: tuple[str, ...] = ()) -> PKI:
    """Write a CA, a server certificate and client certificates into ``directory``."""
    # Optional dependency (the test extra): importing this module must not need it.
    from cryptography import x509  # optional dependency
    from cryptography.hazmat.primitives import hashes, serialization  # optional dependency
    from cryptography.hazmat.primitives.asymmetric import ec  # optional dependency
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID  # optional dependency

    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    start, end = now - datetime.timedelta(days=1), now + datetime.timedelta(days=7)

    def name(cn: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    def write_key(key, path: Path) -> None:
        path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
        path.chmod(0o600)

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = (x509.CertificateBuilder().subject_name(name("tidb-binlog-test-ca"))
               .issuer_name(name("tidb-binlog-test-ca")).public_key(ca_key.public_key())
               .serial_number(x509.random_serial_number())
               .not_valid_before(start).not_valid_after(end)
               .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
               .add_extension(x509.KeyUsage(
                   digital_signature=True, content_commitment=False, key_encipherment=False,
                   data_encipherment=False, key_agreement=False, key_cert_sign=True,
                   crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
               .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()),
                              critical=False)
               .sign(ca_key, hashes.SHA256()))
    ca_path = out / "ca.pem"
    ca_path.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))

    def issue(cn: str, *, server: bool) -> TLSFiles:
        key = ec.generate_private_key(ec.SECP256R1())
        usages = [ExtendedKeyUsageOID.CLIENT_AUTH]
        if server:
            usages.insert(0, ExtendedKeyUsageOID.SERVER_AUTH)
        builder = (x509.CertificateBuilder().subject_name(name(cn)).issuer_name(ca_cert.subject)
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(start).not_valid_after(end)
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None),
                                  critical=True)
                   .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
                   .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                       ca_key.public_key()), critical=False))
        if server:
            builder = builder.add_extension(x509.SubjectAlternativeName([
                x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                x509.IPAddress(ipaddress.ip_address("::1"))]), critical=False)
        cert = builder.sign(ca_key, hashes.SHA256())
        cert_path, key_path = out / f"{cn}.pem", out / f"{cn}-key.pem"
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        write_key(key, key_path)
        return TLSFiles(str(ca_path), str(cert_path), str(key_path))

    server = issue("server", server=True)
    client = issue("client", server=False)
    extra = {cn: issue(cn, server=False) for cn in clients}
    return PKI(out, server, client, extra)
