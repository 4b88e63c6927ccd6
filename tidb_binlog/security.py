"""``[security]`` sections mapped onto the clients that use them: MySQL and the pumps.

TiDB Binlog reads the same three keys everywhere (``ssl-ca``, ``ssl-cert``,
``ssl-key``, plus ``cert-allowed-cn`` on servers): ``[security]`` of pump.toml and
drainer.toml for gRPC and HTTP, ``[syncer.to.security]`` for the downstream MySQL/TiDB
and ``[syncer.to.checkpoint.security]`` for the checkpoint database. The gRPC server
side lives in :mod:`tidb_binlog.pump.transport`; this module is the client side that
was missing, and the one place that says what to set when TLS is missing on one end.

- :func:`mysql_ssl`: the ``ssl`` argument of ``pymysql.connect`` for a section, or
  None. As in TiDB Binlog, TLS to MySQL is on when ``ssl-ca`` is set (the server's
  certificate is verified against it, host name included); ``ssl-cert``/``ssl-key``
  add a client certificate. A certificate without ``ssl-ca`` is a ConfigError rather
  than silently plaintext (TiDB Binlog ignores it).
- :func:`client_tls_paths`: the checked files of a gRPC client's TLS, or None
  (``PumpTLS.from_security`` in :mod:`tidb_binlog.pump_client.transport` uses it).
- :func:`refused_peer`: ``cert-allowed-cn`` on a gRPC server: why a TLS peer's
  certificate is refused (its common name is not listed), or None;
  :func:`refused_names` the same from common names (the HTTP status servers'), and
  :func:`server_allowed_cn` the list a server section enforces.
- :func:`tls_hint`: the sentence added to a connection error when TLS is likely the
  cause (a plaintext client meets a TLS server, or the reverse), naming what to set.
- :func:`mysql_tls_hint`: the same for a MySQL connection error.

Every file named is checked readable up front, so a wrong path is an error naming the
key and the section instead of an opaque handshake failure later.
"""

from __future__ import annotations

import os

from tidb_binlog.errors import ConfigError

__all__ = ["mysql_ssl", "client_tls_paths", "refused_peer", "refused_names",
           "server_allowed_cn", "peer_common_names", "tls_hint", "mysql_tls_hint",
           "tls_enabled"]


def _paths(security) -> tuple[str, str, str]:
    if security is None:
        return "", "", ""
    return (getattr(security, "ssl_ca", "") or "", getattr(security, "ssl_cert", "") or "",
            getattr(security, "ssl_key", "") or "")


def _check_file(path: str, key: str, section: str) -> None:
    if not os.access(path, os.R_OK) or not os.path.isfile(path):
        raise ConfigError(f"[{section}] {key} {path!r} is not a readable file; fix the "
                          "path or remove the key", key=f"{section}.{key}", path=path)


def tls_enabled(security) -> bool:
    """Whether a client with this section speaks TLS (``ssl-ca`` or ``ssl-cert`` set)."""
    ca, cert, _ = _paths(security)
    return bool(ca or cert)


def _checked(security, section: str) -> tuple[str, str, str]:
    ca, cert, key = _paths(security)
    if bool(cert) != bool(key):
        missing = "ssl-key" if cert else "ssl-cert"
        raise ConfigError(f"[{section}] ssl-cert and ssl-key must be set together; "
                          f"{missing} is missing", key=f"{section}.{missing}")
    for value, name in ((ca, "ssl-ca"), (cert, "ssl-cert"), (key, "ssl-key")):
        if value:
            _check_file(value, name, section)
    return ca, cert, key


def mysql_ssl(security, section: str = "syncer.to.security") -> dict[str, str] | None:
    """``pymysql.connect(ssl=...)`` for ``security`` (None: no TLS asked for).

    ``{"ca": ..., "cert": ..., "key": ...}``: pymysql then requires TLS, verifies the
    server's certificate against ``ca`` and its host name, and presents the client
    certificate when given (for accounts created ``REQUIRE X509``).
    """
    ca, cert, key = _checked(security, section)
    if not ca:
        if cert:
            raise ConfigError(f"[{section}] ssl-cert is set but ssl-ca is not: TLS to MySQL "
                              "needs the CA that signed the server's certificate; set "
                              f"[{section}] ssl-ca", key=f"{section}.ssl-ca")
        return None
    out = {"ca": ca}
    if cert:
        out.update(cert=cert, key=key)
    return out


def client_tls_paths(security, section: str = "security") -> tuple[str, str, str] | None:
    """``(ssl-ca, ssl-cert, ssl-key)`` ("" = unset) for a gRPC client, or None for
    plaintext: TiDB's ``cluster-ssl-*`` role, the CA that signed the servers'
    certificates and, for servers that require client certificates (``ssl-ca`` set on
    the server), our own. ``PumpTLS.from_security`` builds the pump client's from it."""
    ca, cert, key = _checked(security, section)
    if not ca and not cert:
        return None
    return ca, cert, key


def refused_peer(auth_context: dict, allowed_cn) -> str | None:
    """Why a call is refused under ``cert-allowed-cn`` (None: allowed).

    ``auth_context`` is gRPC's ``context.auth_context()``. As in TiDB Binlog, the
    check applies to TLS peers only (a plaintext unix-socket caller is local and has
    no certificate), and an empty list allows every certificate the CA signed.
    """
    if not allowed_cn:
        return None
    kind = b"".join(auth_context.get("transport_security_type", ()))
    if kind != b"ssl":
        return None
    names = [n.decode(errors="replace") for n in auth_context.get("x509_common_name", ())]
    return refused_names(names, allowed_cn)


def server_allowed_cn(security) -> tuple[str, ...]:
    """The ``cert-allowed-cn`` a server with this section enforces: () when it does not
    serve TLS (no ``ssl-cert``), since the check applies to TLS peers only."""
    if security is None or not (getattr(security, "ssl_cert", "") or ""):
        return ()
    return tuple(getattr(security, "cert_allowed_cn", ()) or ())


def peer_common_names(peercert: dict | None) -> list[str]:
    """The subject common names of ``ssl.SSLSocket.getpeercert()`` ({} or None when the
    peer sent no certificate)."""
    return [value for rdn in (peercert or {}).get("subject", ()) for key, value in rdn
            if key == "commonName"]


def refused_names(names, allowed_cn) -> str | None:
    """Why a TLS peer whose certificate has the common names ``names`` is refused under
    ``cert-allowed-cn`` (None: allowed, or no list). As in TiDB, a peer without a
    certificate is refused when a list is set."""
    if not allowed_cn or any(n in allowed_cn for n in names):
        return None
    shown = ", ".join(names) or "none"
    return (f"client certificate common name {shown} is not in this server's [security] "
            f"cert-allowed-cn ({', '.join(allowed_cn)}); add it there or use a certificate "
            "with an allowed name")


# -- what to say when TLS is the likely cause ---------------------------------------------
_TLS_WORDS = ("ssl", "tls", "handshake", "certificate", "wrong version number")


def tls_hint(addr: str, detail: str, *, client_tls: bool, client_cert: bool = False,
             section: str = "security") -> str:
    """A sentence naming what to set when ``detail`` (a gRPC error's details) looks like
    a TLS mismatch with the server at ``addr``; "" when it does not.

    What gRPC reports (seen against our pump): a plaintext client meeting a TLS server,
    and a TLS client without a certificate meeting a server that requires one, both see
    "Socket closed" (the server drops the connection in the handshake); a TLS client
    meeting a plaintext server sees "Tls handshake failed ... WRONG_VERSION_NUMBER".
    "Socket closed" also ends a connection to a pump killed mid-call, so the hint says
    "if".
    """
    text = (detail or "").lower()
    closed = any(w in text for w in ("socket closed", "connection reset", "end of file"))
    if not client_tls:
        if closed or any(w in text for w in _TLS_WORDS):
            return (f"; if {addr} serves TLS (its [security] ssl-cert is set), this client "
                    f"must too: set [{section}] ssl-ca (and ssl-cert/ssl-key when the server "
                    "also has ssl-ca: it then requires client certificates)")
        return ""
    if closed and not client_cert:
        return (f"; if {addr} requires client certificates (its [security] ssl-ca is set), "
                f"set [{section}] ssl-cert and ssl-key to a certificate its CA signed")
    if any(w in text for w in _TLS_WORDS):
        return (f"; the TLS handshake with {addr} failed: check that the server serves TLS "
                f"(its [security] ssl-cert is set) and that [{section}] ssl-ca signed its "
                "certificate, and, when it requires one, that ssl-cert is signed by its CA")
    return ""


# MySQL error codes: access denied (a REQUIRE SSL/X509 account without TLS or without a
# client certificate), and the secure-transport refusal of MySQL 5.7+/MariaDB 10.5+.
_ACCESS_DENIED, _SECURE_TRANSPORT_REQUIRED = 1045, 3159


def mysql_tls_hint(addr: str, code: int | None, detail: str, *, ssl: dict | None,
                   section: str = "syncer.to.security") -> str:
    """A sentence naming what to set when a MySQL connection error may be TLS's."""
    text = (detail or "").lower()
    if ssl is None and code in (_ACCESS_DENIED, _SECURE_TRANSPORT_REQUIRED):
        return (f"; if {addr} requires TLS (require_secure_transport, or an account "
                f"created REQUIRE SSL/X509), set [{section}] ssl-ca (and ssl-cert/ssl-key "
                "for REQUIRE X509)")
    if ssl is not None and "cert" not in ssl and code == _ACCESS_DENIED:
        return (f"; if the account requires a client certificate (REQUIRE X509), set "
                f"[{section}] ssl-cert and ssl-key")
    if ssl is not None and any(w in text for w in _TLS_WORDS):
        return (f"; TLS to {addr} failed: check that the server has TLS on and that "
                f"[{section}] ssl-ca signed its certificate, which must name the host "
                "connected to")
    return ""
