"""``UpstreamMeta`` (what pumps and drainers ask the upstream's catalog) survives a kill -9
and restart of the upstream MariaDB: a lookup made while the server is down is asked
again until it answers, instead of failing the replication task (found by the chaos
soak: the schema keeper's job lookup raised "Lost connection" and the task stopped)."""

from __future__ import annotations

import threading
import time

import pymysql
import pytest

from tidb_binlog.errors import UpstreamError, UpstreamUnreachable
from tidb_binlog.node import TxnStatus
from tidb_binlog.testing.collector import BinlogCollector
from tidb_binlog.tso import TimestampOracle
from tidb_binlog.upstream import Upstream
from tidb_binlog.upstream.conn import translate
from tidb_binlog.upstream.meta import UpstreamMeta

pytestmark = pytest.mark.integration


@pytest.fixture
def server(mariadb_factory):
    return mariadb_factory("metaup")


def _job_id(server) -> int:
    up = Upstream(server.params(), BinlogCollector(), TimestampOracle().get_ts)
    try:
        up.ddl("CREATE DATABASE m")
        up.ddl("CREATE TABLE m.t (id INT PRIMARY KEY)")
        up.flush()
        return max(j.id for j in up.meta().history_jobs())
    finally:
        up.close()


def test_a_lookup_waits_for_a_killed_upstream_to_come_back(server):
    job_id = _job_id(server)
    meta = UpstreamMeta(server.params(), retry_s=120)
    assert meta.job(job_id).id == job_id  # connected
    server.kill()
    restarted = threading.Event()

    def restart_later():
        time.sleep(1.5)
        server.start()
        restarted.set()

    th = threading.Thread(target=restart_later, daemon=True)
    th.start()
    try:
        job = meta.job(job_id)  # the kept connection is dead: lost, retried, reconnected
    finally:
        th.join(120)
    assert restarted.is_set()
    assert job.id == job_id and job.query == "CREATE TABLE m.t (id INT PRIMARY KEY)"
    meta.close()


def test_a_lookup_gives_up_after_retry_s_naming_the_server(server):
    meta = UpstreamMeta(server.params(), retry_s=0.5)
    server.kill()
    with pytest.raises(UpstreamUnreachable) as info:
        meta.history_jobs()
    msg = str(info.value)
    assert f"the upstream MariaDB at 127.0.0.1:{server.port} stayed unreachable for 0.5 s" in msg
    assert "Start it again (the lookup is safe to repeat) and restart the task" in msg
    assert isinstance(info.value, UpstreamError) and not info.value.retryable


def test_txn_status_is_not_retried_the_resolver_asks_again_next_round(server):
    sleeps: list[float] = []
    meta = UpstreamMeta(server.params(), retry_s=60, sleep=sleeps.append)
    server.kill()
    with pytest.raises(UpstreamUnreachable):
        meta.txn_status(1)
    assert sleeps == []  # one attempt, no backoff: the pump's next round asks again
    with pytest.raises(UpstreamUnreachable):
        UpstreamMeta(server.params(), retry_s=0.3, sleep=sleeps.append).cluster_id()
    assert sleeps  # the other lookups back off and ask again


def test_txn_status_after_a_restart_answers_on_a_new_connection(server):
    """The pump's resolver kept its connection across an upstream restart: its first
    txn_status after the restart raised "Lost connection" and the prewrites it was
    asking about waited another round (1 s more of drainer stall per restart, chaos
    soak kill9-upstream-db). The lost kept connection is now replaced at once."""
    _job_id(server)  # the catalog exists
    sleeps: list[float] = []
    meta = UpstreamMeta(server.params(), retry_s=60, sleep=sleeps.append)
    assert meta.txn_status(1).state == TxnStatus.ROLLED_BACK  # connected; no status row
    server.kill()
    server.start()
    status = meta.txn_status(1)  # one attempt, as before, but on a new connection
    assert status.state == TxnStatus.ROLLED_BACK and sleeps == []
    meta.close()


def test_lost_connection_codes_translate_to_unreachable():
    for code in (2003, 2006, 2013):
        err = translate(pymysql.err.OperationalError(code, "gone"), "SELECT 1")
        assert type(err) is UpstreamUnreachable and err.code == code
    assert type(translate(pymysql.err.OperationalError(1213, "deadlock"))).__name__ == "TxnConflict"
    assert type(translate(pymysql.err.InterfaceError(0, ""))) is UpstreamUnreachable
