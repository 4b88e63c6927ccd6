"""A TiDB-behaving upstream over MariaDB: transactions and DDL that write binlogs as TiDB does.

See ``tidb_binlog/upstream/README.md``. Public surface::

    Upstream(params, writer, get_ts, *, database=None, clustered_index="on", faults=None)
      .session(database=None) -> Session;  .ddl(sql) -> Job | None;  .meta() -> UpstreamMeta
      .flush(timeout=60) / .close(timeout=60): bounded waits for the Commit binlogs in flight
    Session.begin() -> Txn: insert / update / delete / replace / execute / query / commit / rollback
    UpstreamMeta(params): history_jobs / job / txn_status / cluster_id / snapshot_tables
    Faults(drop_commit_binlog=, crash_after_prewrite=, fail_prewrite=, ddl_round_conflict=);
    errors: tidb_binlog.errors.UpstreamError and its subclasses (README)
    (the in-memory writer for tests is tidb_binlog.testing.collector.BinlogCollector)
    TsoBatcher(source).get_ts: concurrent sessions' timestamps from one TSO call (PD client)
"""

from tidb_binlog.upstream.core import Upstream
from tidb_binlog.upstream.ddl_parse import DDLStatement, parse_ddl
from tidb_binlog.upstream.faults import Faults, SimulatedCrash
from tidb_binlog.upstream.introspect import CLUSTERED_INT_ONLY, CLUSTERED_ON
from tidb_binlog.upstream.meta import UpstreamMeta
from tidb_binlog.upstream.rows import TableCodec
from tidb_binlog.upstream.tso_batch import TsoBatcher
from tidb_binlog.upstream.txn import Raw, Session, Txn

__all__ = [
    "Upstream", "Session", "Txn", "Raw", "UpstreamMeta", "Faults", "SimulatedCrash",
    "TableCodec", "DDLStatement", "parse_ddl", "CLUSTERED_ON",
    "CLUSTERED_INT_ONLY", "TsoBatcher",
]
