"""End to end over TLS: the upstream writes through a TLS pump client into a standalone
pump serving mutual TLS, a drainer pulls from it over TLS (``[security]``) and applies
into a MariaDB that requires TLS, as an account created ``REQUIRE X509``
(``[syncer.to.security]``). The drainer is a task submitted through the Python API
(``Cluster.submit`` -> ``Drainer.start`` -> the merger's gRPC pull): the task's
``[security]`` must reach the pull. Certificates are made at test time."""

from __future__ import annotations

import pytest
from drainer_helpers import drainer_config, query, rows, write

from cluster.api import Cluster
from cluster.launch import LocalCluster
from tidb_binlog.node import PUMP
from tidb_binlog.pump.server import open_pump
from tidb_binlog.pump_client.transport import PumpTLS
from tidb_binlog.testing.certs import make_pki
from tidb_binlog.upstream import Upstream

pytest.importorskip("cryptography")
pytestmark = pytest.mark.timeout(300)

X509_USER = "x509user"


def test_a_drainer_pulls_from_a_tls_pump_into_a_tls_only_downstream(
        ray_local, mariadb_factory, tmp_path):
    pki = make_pki(tmp_path / "pki")
    up_db = mariadb_factory("up")
    down_db = mariadb_factory("down", tls=pki.server)
    query(down_db, f"CREATE USER '{X509_USER}'@'127.0.0.1' REQUIRE X509")
    query(down_db, f"GRANT ALL ON *.* TO '{X509_USER}'@'127.0.0.1'")
    cluster = LocalCluster(tmp_path / "cluster", pumps=0,
                           upstream_params=up_db.params()).start()
    pump = task = upstream = None
    try:
        # a pump outside Ray (no PumpActor of its name): the drainer pulls it over gRPC
        pump = open_pump(cluster.pump_config("tls-pump", pki.server.keys()),
                         registry=cluster.registry)
        assert [n.node_id for n in cluster.registry.nodes(PUMP)] == ["tls-pump"]
        upstream = Upstream(up_db.params(),
                            cluster.pump_client(tls=PumpTLS.from_security(pki.client)),
                            cluster.get_ts)
        upstream.ddl("CREATE DATABASE shop")
        upstream.ddl("CREATE TABLE shop.t (id INT PRIMARY KEY, v VARCHAR(16))")
        write(upstream, 0, 20)
        cfg = drainer_config(down_db, **{"syncer.to.user": X509_USER, **pki.server.keys(),
                                         **pki.client.keys("syncer.to.security")})
        task = Cluster(cluster.registry, cluster.namespace).submit("tls", config=cfg)
        assert task.wait_synced(timeout=120).pumps == ("tls-pump",)
        assert len(rows(down_db, "shop.t")) == 20
        assert rows(down_db, "shop.t") == rows(up_db, "shop.t")
        # the rows and the checkpoint went in over TLS as the certificate's account
        saved = query(down_db, "SELECT COUNT(*) FROM tidb_binlog.checkpoint")
        assert saved[0][0] == 1
    finally:
        if task is not None:
            task.remove()
        if upstream is not None:
            upstream.close()
        if pump is not None:
            pump.stop()
        cluster.stop()
