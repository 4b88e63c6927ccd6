"""``[security]`` sections -> pymysql ``ssl``, pump client TLS and gRPC credentials, and the
hints a TLS mismatch adds to an error (tidb_binlog/security.py)."""

from __future__ import annotations

import grpc
import pytest

from tidb_binlog.config import load_drainer_config, load_pump_config
from tidb_binlog.config.reparo import load_reparo_config
from tidb_binlog.drainer.checkpoint.store import MySQLCheckpointStore, open_checkpoint_store
from tidb_binlog.drainer.pipeline.driver import TaskDriver
from tidb_binlog.drainer.pipeline.settings import TaskSettings
from tidb_binlog.drainer.sinks.mysql.downstream import DownstreamConfig
from tidb_binlog.errors import ConfigError
from tidb_binlog.pump.transport import channel_credentials, server_credentials
from tidb_binlog.pump_client.transport import PumpTLS
from tidb_binlog.security import (
    client_tls_paths,
    mysql_ssl,
    mysql_tls_hint,
    peer_common_names,
    refused_names,
    server_allowed_cn,
    tls_hint,
)
from tidb_binlog.testing.certs import TLSFiles, make_pki

pytest.importorskip("cryptography")


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"), clients=("other",))


def test_pki_files_exist_and_are_shaped_like_security(pki):
    for files in (pki.server, pki.client, pki.clients["other"]):
        for path in (files.ssl_ca, files.ssl_cert, files.ssl_key):
            assert open(path).read().startswith("-----BEGIN")
    assert pki.ca_only == TLSFiles(ssl_ca=pki.server.ssl_ca)
    assert pki.client.keys("syncer.to.security") == {
        "syncer.to.security.ssl-ca": pki.client.ssl_ca,
        "syncer.to.security.ssl-cert": pki.client.ssl_cert,
        "syncer.to.security.ssl-key": pki.client.ssl_key}


def test_mysql_ssl_mapping(pki):
    assert mysql_ssl(None) is None
    assert mysql_ssl(TLSFiles()) is None
    assert mysql_ssl(pki.ca_only) == {"ca": pki.server.ssl_ca}
    assert mysql_ssl(pki.client) == {"ca": pki.client.ssl_ca, "cert": pki.client.ssl_cert,
                                     "key": pki.client.ssl_key}


def test_mysql_ssl_refuses_what_would_be_silently_plaintext_or_broken(pki, tmp_path):
    with pytest.raises(ConfigError, match=r"\[syncer.to.security\] ssl-cert is set but ssl-ca"):
        mysql_ssl(TLSFiles(ssl_cert=pki.client.ssl_cert, ssl_key=pki.client.ssl_key))
    with pytest.raises(ConfigError, match="ssl-key is missing"):
        mysql_ssl(TLSFiles(ssl_ca=pki.client.ssl_ca, ssl_cert=pki.client.ssl_cert))
    missing = str(tmp_path / "nope.pem")
    with pytest.raises(ConfigError) as info:
        mysql_ssl(TLSFiles(ssl_ca=missing), "syncer.to.checkpoint.security")
    assert "[syncer.to.checkpoint.security] ssl-ca" in str(info.value)
    assert missing in str(info.value)
    assert info.value.key == "syncer.to.checkpoint.security.ssl-ca"


def test_drainer_config_sections_reach_the_mysql_connections(pki):
    cfg = load_drainer_config(None, {
        "syncer.to.host": "127.0.0.1", "syncer.to.port": 3306,
        **pki.ca_only.keys("syncer.to.security"),
        **pki.client.keys("syncer.to.checkpoint.security")}, env={})
    assert DownstreamConfig.from_drainer_config(cfg).ssl == {"ca": pki.server.ssl_ca}
    store = open_checkpoint_store(cfg)
    assert isinstance(store, MySQLCheckpointStore)
    cp_cfg = store._ds.config
    assert cp_cfg.ssl == {"ca": pki.client.ssl_ca, "cert": pki.client.ssl_cert,
                          "key": pki.client.ssl_key}
    assert cp_cfg.tls_section == "syncer.to.checkpoint.security"
    plain = load_drainer_config(None, {"syncer.to.host": "127.0.0.1"}, env={})
    assert DownstreamConfig.from_drainer_config(plain).ssl is None


def test_a_task_pulls_standalone_pumps_with_its_security_even_when_not_serving(pki):
    """The gRPC pull's TLS came from the node's ServiceSettings only, so a task started
    without serving (``Drainer.start(serve=False)``) pulled TLS pumps in plaintext."""
    cfg = load_drainer_config(None, {"syncer.to.host": "127.0.0.1", "compressor": "gzip",
                                     **pki.client.keys()}, env={})
    settings = TaskSettings.from_config(cfg, upstream_meta={})
    assert settings.pump_security == cfg.security and settings.pump_compressor == "gzip"

    class NoActors:  # no PumpActor of the pump's name: it is pulled over gRPC
        def find_actor(self, name, namespace):
            return None

    driver = TaskDriver(settings, NoActors(), registry=None, service=None, autostart=False)
    feed = driver._open_feed("tls-pump", "127.0.0.1:1", 0)
    try:
        assert driver.feed_kinds == {"tls-pump": "grpc"}
        assert feed.source.tls == cfg.security
    finally:
        feed.close()


def test_reparo_dest_db_security_maps_to_its_mysql_ssl(pki, tmp_path):
    base = {"data-dir": str(tmp_path), "dest-type": "mysql"}
    cfg = load_reparo_config(None, {**base, **pki.client.keys("dest-db.security")})
    assert mysql_ssl(cfg.dest_db.security) == {"ca": pki.client.ssl_ca,
                                               "cert": pki.client.ssl_cert,
                                               "key": pki.client.ssl_key}
    assert load_reparo_config(None, base).dest_db.security.ssl_ca == ""
    with pytest.raises(ConfigError) as info:  # checked at load, before any file is read
        load_reparo_config(None, {**base, "dest-db.security.ssl-ca": str(tmp_path / "no")})
    assert info.value.key == "dest-db.security.ssl-ca"
    assert "[dest-db.security] ssl-ca" in str(info.value)
    # a print run connects nowhere: its TLS keys are not checked
    load_reparo_config(None, {**base, "dest-type": "print",
                              "dest-db.security.ssl-ca": str(tmp_path / "no")})


def test_a_checkpoint_in_the_downstream_inherits_its_tls(pki):
    """No [syncer.to.checkpoint.security] and the checkpoint on the downstream's server:
    the downstream's TLS (TiDB Binlog: a checkpoint following the downstream uses its
    TLS); on another server, none."""
    same = load_drainer_config(None, {"syncer.to.host": "127.0.0.1", "syncer.to.port": 3306,
                                      **pki.client.keys("syncer.to.security")}, env={})
    cp_cfg = open_checkpoint_store(same)._ds.config
    assert cp_cfg.ssl == mysql_ssl(pki.client) and cp_cfg.tls_section == "syncer.to.security"
    other = load_drainer_config(None, {"syncer.to.host": "127.0.0.1", "syncer.to.port": 3306,
                                       **pki.client.keys("syncer.to.security"),
                                       "syncer.to.checkpoint.port": 3307}, env={})
    assert open_checkpoint_store(other)._ds.config.ssl is None


def test_the_downstream_password_never_shows_with_tls(pki):
    cfg = DownstreamConfig(password="hunter2", ssl=mysql_ssl(pki.client))
    assert "hunter2" not in repr(cfg)


def test_client_tls_paths_and_pump_tls(pki):
    assert client_tls_paths(None) is None
    assert client_tls_paths(TLSFiles()) is None
    assert client_tls_paths(pki.ca_only) == (pki.server.ssl_ca, "", "")
    assert PumpTLS.from_security(None) is None
    tls = PumpTLS.from_security(pki.client)
    assert tls == PumpTLS(pki.client.ssl_ca, pki.client.ssl_cert, pki.client.ssl_key)
    assert isinstance(tls.credentials(), grpc.ChannelCredentials)
    assert PumpTLS.from_security(pki.ca_only) == PumpTLS(pki.server.ssl_ca)
    with pytest.raises(ConfigError, match=r"\[security\] ssl-cert and ssl-key"):
        PumpTLS.from_security(TLSFiles(ssl_ca=pki.client.ssl_ca, ssl_key=pki.client.ssl_key))


def test_pump_config_security_maps_to_grpc_credentials(pki):
    server = load_pump_config(None, pki.server.keys())
    assert isinstance(server_credentials(server.security), grpc.ServerCredentials)
    assert server_credentials(load_pump_config(None, {}).security) is None
    assert isinstance(channel_credentials(pki.client), grpc.ChannelCredentials)
    assert channel_credentials(TLSFiles()) is None


def test_tls_hints_name_what_to_set():
    addr = "127.0.0.1:8250"
    plain = tls_hint(addr, "failed to connect to all addresses; last error: UNAVAILABLE: "
                           "ipv4:127.0.0.1:8250: Socket closed", client_tls=False)
    assert addr in plain and "set [security] ssl-ca" in plain
    assert tls_hint(addr, "Connection refused", client_tls=False) == ""
    wrong = tls_hint(addr, "Ssl handshake failed: SSL_ERROR_SSL: WRONG_VERSION_NUMBER",
                     client_tls=True)
    assert addr in wrong and "[security] ssl-ca signed its certificate" in wrong
    assert tls_hint(addr, "Connection refused", client_tls=True) == ""

    assert "set [syncer.to.security] ssl-ca" in mysql_tls_hint(addr, 1045, "denied", ssl=None)
    assert "ssl-cert and ssl-key" in mysql_tls_hint(addr, 1045, "denied", ssl={"ca": "c"})
    assert mysql_tls_hint(addr, 1045, "denied", ssl={"ca": "c", "cert": "x", "key": "k"}) == ""
    assert mysql_tls_hint(addr, 1146, "no such table", ssl=None) == ""
    assert "TLS to" in mysql_tls_hint(addr, 2026, "SSL is required", ssl={"ca": "c"})


def test_cert_allowed_cn_from_common_names_and_server_sections(pki):
    peer = {"subject": ((("countryName", "NL"),), (("commonName", "client"),))}
    assert peer_common_names(peer) == ["client"]
    assert peer_common_names({}) == [] and peer_common_names(None) == []
    assert refused_names(["client"], ("client",)) is None
    assert refused_names(["anyone"], ()) is None  # no list: the CA decides
    assert "common name none is not in" in refused_names([], ("client",))
    assert "intruder is not in this server's [security] cert-allowed-cn (client)" in \
        refused_names(["intruder"], ("client",))
    with_cn = TLSFiles(pki.server.ssl_ca, pki.server.ssl_cert, pki.server.ssl_key,
                       cert_allowed_cn=("client",))
    assert server_allowed_cn(with_cn) == ("client",)
    # a server without a certificate serves plaintext: there is no peer name to check
    assert server_allowed_cn(TLSFiles(cert_allowed_cn=("client",))) == ()
    assert server_allowed_cn(None) == ()
