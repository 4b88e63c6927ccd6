"""TLS of the Spark jobs' connections (``[upstream.security]`` / ``[downstream.security]``)
against a TLS-only MariaDB (``require_secure_transport``) with an account created
``REQUIRE X509``: the diff's pymysql connections (driver and Spark tasks) present the
client certificate, Spark's JDBC reads verify the server with the CA, and a config without
TLS is refused naming the server."""

from __future__ import annotations

import pytest

from spark_on_ray import diff
from spark_on_ray.errors import SparkJobError, SparkSetupError
from tidb_binlog.config.spark import load_spark_config
from tidb_binlog.testing.certs import make_pki

pytest.importorskip("cryptography")

X509_USER = "x509spark"


def _cfg(db, user, tls, tmp_path):
    keys = {"diff.tables": ["tls_db"], "diff.fix-sql-file": str(tmp_path / "fix.sql"),
            "diff.chunk-size": 16}
    for side in ("upstream", "downstream"):  # the same server on both sides: equal
        keys.update({f"{side}.host": db.host, f"{side}.port": db.port, f"{side}.user": user,
                     f"{side}.password": ""})
        if tls is not None:
            keys.update(tls.keys(f"{side}.security"))
    return load_spark_config(None, keys)


def test_spark_jobs_speak_tls_with_a_client_certificate(spark_handle, mariadb_factory,
                                                        tmp_path):
    pki = make_pki(tmp_path / "pki")
    db = mariadb_factory("tls", tls=pki.server)
    conn = db.connect(autocommit=True)
    with conn.cursor() as cur:
        cur.execute(f"CREATE USER '{X509_USER}'@'127.0.0.1' REQUIRE X509")
        cur.execute(f"GRANT ALL ON *.* TO '{X509_USER}'@'127.0.0.1'")
        cur.execute("CREATE DATABASE tls_db")
        cur.execute("USE tls_db")
        cur.execute("CREATE TABLE tls_db.t (id INT PRIMARY KEY, v VARCHAR(10))")
        cur.execute("INSERT INTO tls_db.t SELECT seq, CONCAT('v', seq) FROM seq_1_to_100")
    conn.close()

    # 100 rows in chunks of 16: more than 2 x slots checksum tasks, so they run on Spark
    result = diff.run(_cfg(db, X509_USER, pki.client, tmp_path), handle=spark_handle)
    assert result.equal and result.tables[0].upstream_rows == 100

    # Spark's JDBC reads: the CA verifies the server (root has no client certificate)
    ca_cfg = _cfg(db, db.params()["user"], pki.ca_only, tmp_path)
    rows = spark_handle.read_query(ca_cfg.upstream, "SELECT COUNT(*) AS n FROM tls_db.t")
    assert rows.collect()[0]["n"] == 100
    with pytest.raises(SparkSetupError, match="Java keystore"):
        spark_handle.read_query(_cfg(db, X509_USER, pki.client, tmp_path).upstream, "SELECT 1")

    # without [upstream.security] the X509 account is refused, with the server named
    with pytest.raises(SparkJobError, match=f"cannot connect to the upstream {X509_USER}@"):
        diff.run(_cfg(db, X509_USER, None, tmp_path), handle=spark_handle)
