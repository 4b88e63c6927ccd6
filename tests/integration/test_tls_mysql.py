"""TLS to MySQL: ``[syncer.to.security]``, ``[syncer.to.checkpoint.security]`` and reparo's
``[dest-db.security]`` against a real MariaDB that requires TLS (``require_secure_transport``) and an account created
``REQUIRE X509``, with certificates made at test time."""

from __future__ import annotations

import itertools

import pytest

from tidb_binlog.binlogfile import Binlogger
from tidb_binlog.config import load_drainer_config
from tidb_binlog.config.reparo import load_reparo_config
from tidb_binlog.drainer.apply.sql import Statement
from tidb_binlog.drainer.checkpoint.checkpoint import Checkpoint
from tidb_binlog.drainer.checkpoint.store import MySQLCheckpointStore, open_checkpoint_store
from tidb_binlog.drainer.sinks.mysql.downstream import Downstream, DownstreamConfig
from tidb_binlog.drainer.translate.pb import ddl_record
from tidb_binlog.errors import DownstreamError
from tidb_binlog.reparo.runner import run_reparo
from tidb_binlog.security import mysql_ssl
from tidb_binlog.testing.certs import make_pki
from tidb_binlog.testing.collector import BinlogCollector
from tidb_binlog.upstream import Upstream
from tidb_binlog.upstream.meta import UpstreamMeta

pytest.importorskip("cryptography")

X509_USER = "x509user"


@pytest.fixture
def tls_db(mariadb_factory, tmp_path):
    """A TLS-only MariaDB with an account that needs a client certificate of our CA."""
    pki = make_pki(tmp_path / "pki")
    db = mariadb_factory("tls", tls=pki.server)
    conn = db.connect(autocommit=True)
    with conn.cursor() as cur:
        cur.execute(f"CREATE USER '{X509_USER}'@'127.0.0.1' REQUIRE X509")
        cur.execute(f"GRANT ALL ON *.* TO '{X509_USER}'@'127.0.0.1'")
    conn.close()
    return db, pki


def drainer_config(db, user, security=None, checkpoint_security=None):
    keys = {"syncer.to.host": db.host, "syncer.to.port": db.port, "syncer.to.user": user,
            "syncer.to.password": ""}
    if security is not None:
        keys.update(security.keys("syncer.to.security"))
    if checkpoint_security is not None:
        keys.update(checkpoint_security.keys("syncer.to.checkpoint.security"))
    return load_drainer_config(None, keys, env={})


def ssl_version(ds: Downstream) -> str:
    rows = ds.query(Statement("SHOW SESSION STATUS LIKE 'Ssl_version'", None))
    return rows[0][1] if rows else ""


def test_the_downstream_connects_with_a_client_certificate(tls_db):
    db, pki = tls_db
    cfg = drainer_config(db, X509_USER, pki.client)
    ds_cfg = DownstreamConfig.from_drainer_config(cfg)
    assert ds_cfg.ssl == {"ca": pki.client.ssl_ca, "cert": pki.client.ssl_cert,
                          "key": pki.client.ssl_key}
    ds = Downstream(ds_cfg)
    try:
        assert ssl_version(ds).startswith("TLS")
    finally:
        ds.close()


def test_an_x509_account_without_a_certificate_names_ssl_cert(tls_db):
    db, pki = tls_db
    ds = Downstream(DownstreamConfig.from_drainer_config(drainer_config(db, X509_USER,
                                                                        pki.ca_only)))
    with pytest.raises(DownstreamError) as info:
        ds.connection()
    text = str(info.value)
    assert "1045" in text and "[syncer.to.security] ssl-cert and ssl-key" in text


def test_no_security_section_names_what_to_set(tls_db):
    db, _ = tls_db
    ds = Downstream(DownstreamConfig.from_drainer_config(drainer_config(db, X509_USER)))
    with pytest.raises(DownstreamError) as info:
        ds.connection()
    text = str(info.value)
    assert f"{db.host}:{db.port}" in text
    assert "requires TLS" in text and "set [syncer.to.security] ssl-ca" in text


def test_tls_asked_of_a_server_without_tls_says_so(mariadb_factory, tmp_path):
    plain = mariadb_factory("plain")
    pki = make_pki(tmp_path / "pki")
    ds = Downstream(DownstreamConfig.from_drainer_config(drainer_config(plain, "root",
                                                                        pki.client)))
    with pytest.raises(DownstreamError) as info:
        ds.connection()
    text = str(info.value)
    assert f"{plain.host}:{plain.port}" in text
    assert "TLS" in text or "SSL" in text


def test_the_checkpoint_store_uses_its_own_security_section(tls_db):
    db, pki = tls_db
    # the downstream needs no certificate (root), the checkpoint's account does: each
    # section is read for its own connection
    cfg = load_drainer_config(None, {
        "syncer.to.host": db.host, "syncer.to.port": db.port, "syncer.to.user": "root",
        **pki.ca_only.keys("syncer.to.security"),
        "syncer.to.checkpoint.user": X509_USER,
        **pki.client.keys("syncer.to.checkpoint.security")}, env={})
    store = open_checkpoint_store(cfg)
    assert isinstance(store, MySQLCheckpointStore)
    try:
        assert store.load() is None
        store.save(Checkpoint(commit_ts=42))
        assert store.load().commit_ts == 42
    finally:
        store.close()
    # the same account with no TLS anywhere is refused; the checkpoint is on the
    # downstream's server, so the error names the section it would inherit TLS from
    bare = load_drainer_config(None, {
        "syncer.to.host": db.host, "syncer.to.port": db.port, "syncer.to.user": "root",
        "syncer.to.checkpoint.user": X509_USER}, env={})
    with pytest.raises(DownstreamError) as info:
        open_checkpoint_store(bare).load()
    assert "set [syncer.to.security] ssl-ca" in str(info.value)


def test_upstream_connections_take_tls_in_their_params(tls_db):
    """Upstream parameters are pymysql's keywords (the registry's upstream-meta JSON, a
    LocalCluster's ``upstream_params``): ``ssl`` there reaches every upstream connection,
    the emulated TiDB's and the meta reads (DDL history, missing-commit resolution)."""
    db, pki = tls_db
    params = {**db.params(), "user": X509_USER, "ssl": mysql_ssl(pki.client)}
    ts = itertools.count(1000)
    upstream = Upstream(params, BinlogCollector(), lambda: next(ts))
    meta = UpstreamMeta(params, retry_s=0)
    try:
        upstream.ddl("CREATE DATABASE shop")
        assert [j.query for j in meta.history_jobs()][-1:] == ["CREATE DATABASE shop"]
    finally:
        meta.close()
        upstream.close()


def test_reparo_restores_into_a_tls_only_server_with_dest_db_security(tls_db, tmp_path):
    db, pki = tls_db
    with Binlogger(tmp_path / "files") as b:
        b.write_many([ddl_record(5, "", "CREATE DATABASE restored")])
        b.sync()
    keys = {"data-dir": str(tmp_path / "files"), "dest-type": "mysql",
            "dest-db.host": db.host, "dest-db.port": db.port, "dest-db.user": X509_USER,
            "dest-db.password": ""}
    with pytest.raises(DownstreamError) as info:  # no TLS asked for: refused, and told why
        run_reparo(load_reparo_config(None, keys), out=lambda line: None)
    assert "set [dest-db.security] ssl-ca" in str(info.value)
    result = run_reparo(load_reparo_config(None, {**keys, **pki.client.keys("dest-db.security")}),
                        out=lambda line: None)
    assert result.records == 1
    conn = db.connect(autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.execute("SHOW DATABASES LIKE 'restored'")
            assert cur.fetchall() == (("restored",),)
    finally:
        conn.close()
