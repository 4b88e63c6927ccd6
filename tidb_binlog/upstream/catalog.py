"""The upstream's TiDB-style metadata, persisted in the upstream MariaDB itself.

Everything lives in the schema ``tidb_binlog_upstream`` of the upstream server, so
the metadata commits atomically with what it describes (the txn-status row with
the data; table infos and the DDL job with the DDL's binlog round):

=================  ==================================================================
table              invariant
=================  ==================================================================
``meta``           ``global_id``: the last id handed out for databases, tables,
                   partitions and DDL jobs (TiDB's GenGlobalID); only grows.
                   ``schema_version``: bumped by every DDL binlog round; only grows.
                   ``cluster_id``: set once at bootstrap (the one given to the
                   Upstream, else random), never changes; stored as the signed
                   two's complement of the uint64 id.
``dbs``            one row per database: id, name, DBInfo JSON.
``tables``         one row per table: id (logical), db id, name, TableInfo JSON.
``ddl_history``    one row per finished job: job id, schema version, Job JSON.
``ddl_jobs``       TiDB's DDL job queue: one row per job that committed a binlog round
                   but is not finished (DROP COLUMN after its DeleteOnly round): job id,
                   Job JSON, ``step`` (what remains, e.g. ``drop_column``). Inserted in
                   the catalog transaction of that round, deleted in the one that puts
                   the job in ``ddl_history``, so a job is in at most one of the two and
                   never lost when its last round fails; the next DDL owner finishes it
                   (``ddl.resume_queued``).
``txn_status``     one row per committed binlog transaction: start_ts → commit_ts.
                   The row is inserted (commit_ts 0) inside the transaction with its
                   first change, so before its Prewrite binlog is written, and set to
                   the commit_ts just before COMMIT (a transaction that changed nothing
                   deletes it), so it exists exactly when the transaction committed
                   with a binlog, and a running transaction holds its row lock (see
                   UpstreamMeta).
=================  ==================================================================

:class:`Snapshot` is an immutable view of dbs/tables at one schema version, which
sessions share; :class:`Catalog` reads and writes the tables above with a cursor it
is given (the caller owns transactions).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from functools import cached_property

from tidb_binlog.errors import ClusterIDMismatch, InvalidArgument, UpstreamSchemaError
from tidb_binlog.model import DBInfo, Job, TableInfo

__all__ = ["CATALOG_DB", "Catalog", "Snapshot", "META_GLOBAL_ID", "META_SCHEMA_VERSION",
           "META_CLUSTER_ID"]

CATALOG_DB = "tidb_binlog_upstream"
# meta keys (see the module docstring for their invariants)
META_GLOBAL_ID = "global_id"
META_SCHEMA_VERSION = "schema_version"
META_CLUSTER_ID = "cluster_id"

_DDL = (
    f"CREATE DATABASE IF NOT EXISTS {CATALOG_DB}",
    f"CREATE TABLE IF NOT EXISTS {CATALOG_DB}.meta (name VARCHAR(64) PRIMARY KEY, "
    "value BIGINT NOT NULL) ENGINE=InnoDB",
    f"CREATE TABLE IF NOT EXISTS {CATALOG_DB}.dbs (id BIGINT PRIMARY KEY, "
    "name VARCHAR(64) NOT NULL UNIQUE, info LONGTEXT NOT NULL) ENGINE=InnoDB",
    f"CREATE TABLE IF NOT EXISTS {CATALOG_DB}.tables (id BIGINT PRIMARY KEY, "
    "db_id BIGINT NOT NULL, name VARCHAR(64) NOT NULL, info LONGTEXT NOT NULL, "
    "UNIQUE KEY db_name (db_id, name)) ENGINE=InnoDB",
    f"CREATE TABLE IF NOT EXISTS {CATALOG_DB}.ddl_history (job_id BIGINT PRIMARY KEY, "
    "schema_version BIGINT NOT NULL, job LONGTEXT NOT NULL, KEY (schema_version)) ENGINE=InnoDB",
    f"CREATE TABLE IF NOT EXISTS {CATALOG_DB}.txn_status (start_ts BIGINT PRIMARY KEY, "
    "commit_ts BIGINT NOT NULL) ENGINE=InnoDB",
    # IF NOT EXISTS: catalogs bootstrapped before the queue existed get it on the next start
    f"CREATE TABLE IF NOT EXISTS {CATALOG_DB}.ddl_jobs (job_id BIGINT PRIMARY KEY, "
    "step VARCHAR(32) NOT NULL, job LONGTEXT NOT NULL) ENGINE=InnoDB",
)


_UINT64 = (1 << 64) - 1


def _signed64(v: int) -> int:
    """A uint64 as the BIGINT (signed) the meta table stores."""
    return v - (1 << 64) if v >= 1 << 63 else v


@dataclass(frozen=True)
class Snapshot:
    """Databases and tables at one schema version (treat as read-only)."""

    version: int = 0
    dbs: dict[str, DBInfo] = field(default_factory=dict)  # name -> DBInfo
    tables: dict[tuple[str, str], TableInfo] = field(default_factory=dict)  # (db, name) -> info

    @cached_property
    def tables_by_id(self) -> dict[int, TableInfo]:
        """Logical table id -> TableInfo (built once per snapshot)."""
        return {t.id: t for t in self.tables.values()}

    def db(self, name: str) -> DBInfo:
        try:
            return self.dbs[name]
        except KeyError:
            raise UpstreamSchemaError(
                f"database {name!r} is unknown to the upstream catalog; create it with "
                "Upstream.ddl('CREATE DATABASE ...')") from None

    def table(self, db: str, name: str) -> TableInfo:
        try:
            return self.tables[(db, name)]
        except KeyError:
            raise UpstreamSchemaError(
                f"table {db}.{name} is unknown to the upstream catalog; create it with "
                "Upstream.ddl('CREATE TABLE ...')") from None

    def db_name_of(self, db_id: int) -> str:
        for name, info in self.dbs.items():
            if info.id == db_id:
                return name
        raise UpstreamSchemaError(f"no database with id {db_id}")


class Catalog:
    """Reads and writes the catalog tables through a caller-owned cursor."""

    @staticmethod
    def bootstrap(cur, cluster_id: int | None = None) -> int:
        """Create the catalog if missing; return its cluster id.

        A new catalog adopts ``cluster_id`` (random when None); an existing one keeps
        its own, and a different ``cluster_id`` is refused, since pumps and drainers
        of one cluster must all agree on it."""
        if cluster_id is not None and not 0 < cluster_id < 1 << 64:
            raise InvalidArgument(f"cluster_id must be in [1, 2**64), got {cluster_id}")
        for stmt in _DDL:
            cur.execute(stmt)
        wanted = cluster_id or random.SystemRandom().randrange(1, 1 << 62)
        cur.execute(f"INSERT IGNORE INTO {CATALOG_DB}.meta VALUES (%s, 0), (%s, 0), (%s, %s)",
                    (META_GLOBAL_ID, META_SCHEMA_VERSION, META_CLUSTER_ID, _signed64(wanted)))
        stored = Catalog.cluster_id(cur)
        if cluster_id is not None and stored != cluster_id:
            raise ClusterIDMismatch(
                f"the upstream catalog ({CATALOG_DB}.meta) already has cluster id {stored}, not "
                f"the {cluster_id} asked for; pass cluster_id={stored} (or None), or use a "
                "fresh upstream database", expected=stored, got=cluster_id)
        return stored

    @staticmethod
    def cluster_id(cur) -> int:
        return Catalog.meta_value(cur, META_CLUSTER_ID) & _UINT64

    @staticmethod
    def meta_value(cur, key: str, *, lock: str = "") -> int:
        cur.execute(f"SELECT value FROM {CATALOG_DB}.meta WHERE name=%s {lock}", (key,))
        row = cur.fetchone()
        if row is None:
            raise UpstreamSchemaError(
                f"upstream catalog has no meta key {key!r}; was it bootstrapped?")
        return int(row[0])

    @staticmethod
    def alloc_ids(cur, count: int = 1) -> int:
        """Reserve ``count`` global ids; return the first."""
        cur.execute(f"UPDATE {CATALOG_DB}.meta SET value = value + %s WHERE name=%s",
                    (count, META_GLOBAL_ID))
        return Catalog.meta_value(cur, META_GLOBAL_ID) - count + 1

    @staticmethod
    def bump_version(cur) -> int:
        cur.execute(f"UPDATE {CATALOG_DB}.meta SET value = value + 1 WHERE name=%s",
                    (META_SCHEMA_VERSION,))
        return Catalog.meta_value(cur, META_SCHEMA_VERSION)

    @staticmethod
    def load(cur) -> Snapshot:
        version = Catalog.meta_value(cur, META_SCHEMA_VERSION)
        cur.execute(f"SELECT name, info FROM {CATALOG_DB}.dbs")
        dbs = {name: DBInfo.from_json(info) for name, info in cur.fetchall()}
        by_id = {d.id: name for name, d in dbs.items()}
        cur.execute(f"SELECT db_id, name, info FROM {CATALOG_DB}.tables")
        tables = {(by_id[db_id], name): TableInfo.from_json(info)
                  for db_id, name, info in cur.fetchall() if db_id in by_id}
        return Snapshot(version, dbs, tables)

    @staticmethod
    def put_db(cur, info: DBInfo) -> None:
        cur.execute(f"REPLACE INTO {CATALOG_DB}.dbs VALUES (%s, %s, %s)",
                    (info.id, info.db_name.O, info.to_json()))

    @staticmethod
    def drop_db(cur, db_id: int) -> None:
        cur.execute(f"DELETE FROM {CATALOG_DB}.tables WHERE db_id=%s", (db_id,))
        cur.execute(f"DELETE FROM {CATALOG_DB}.dbs WHERE id=%s", (db_id,))

    @staticmethod
    def put_table(cur, db_id: int, info: TableInfo) -> None:
        cur.execute(f"REPLACE INTO {CATALOG_DB}.tables VALUES (%s, %s, %s, %s)",
                    (info.id, db_id, info.name.O, info.to_json()))

    @staticmethod
    def drop_table(cur, table_id: int) -> None:
        cur.execute(f"DELETE FROM {CATALOG_DB}.tables WHERE id=%s", (table_id,))

    @staticmethod
    def add_job(cur, job: Job) -> None:
        cur.execute(f"INSERT INTO {CATALOG_DB}.ddl_history VALUES (%s, %s, %s)",
                    (job.id, job.schema_version, job.to_json()))

    @staticmethod
    def queue_job(cur, job: Job, step: str) -> None:
        """Put ``job`` in the DDL job queue with what remains to do (see ``ddl_jobs``)."""
        cur.execute(f"REPLACE INTO {CATALOG_DB}.ddl_jobs VALUES (%s, %s, %s)",
                    (job.id, step, job.to_json()))

    @staticmethod
    def dequeue_job(cur, job_id: int) -> None:
        cur.execute(f"DELETE FROM {CATALOG_DB}.ddl_jobs WHERE job_id=%s", (job_id,))

    @staticmethod
    def queued_jobs(cur) -> list[tuple[Job, str]]:
        """Unfinished jobs, oldest first, with the step that remains for each."""
        cur.execute(f"SELECT job, step FROM {CATALOG_DB}.ddl_jobs ORDER BY job_id")
        return [(Job.from_json(job), step) for job, step in cur.fetchall()]

    @staticmethod
    def jobs(cur, up_to_schema_version: int | None = None) -> list[Job]:
        if up_to_schema_version is None:
            cur.execute(f"SELECT job FROM {CATALOG_DB}.ddl_history ORDER BY schema_version, job_id")
        else:
            cur.execute(f"SELECT job FROM {CATALOG_DB}.ddl_history WHERE schema_version <= %s "
                        "ORDER BY schema_version, job_id", (up_to_schema_version,))
        return [Job.from_json(r[0]) for r in cur.fetchall()]

    @staticmethod
    def job(cur, job_id: int) -> Job | None:
        cur.execute(f"SELECT job FROM {CATALOG_DB}.ddl_history WHERE job_id=%s", (job_id,))
        row = cur.fetchone()
        return Job.from_json(row[0]) if row else None
