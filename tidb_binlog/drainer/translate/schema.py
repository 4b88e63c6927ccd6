"""The schema keeper: which table schema each binlog row is decoded with.

TiDB Binlog's ``drainer/schema.go``, as a plain object the shell drives.

**State.** Databases by id (``DBInfo``); for each table id its last two
``(schema_version, TableInfo)`` entries (so DML written under the previous
schema version still decodes after a DDL); table id → (database, table) names;
the set of table ids removed by TRUNCATE (DML on them is dropped); the tables in
the middle of a DROP COLUMN; ``schema_version``, the highest version applied.

**Jobs.** DDL jobs (``tidb_binlog.model.Job``) are queued with :meth:`add_job` in
schema-version order: a job whose version is not above the last queued one is
ignored. :meth:`apply_until` applies every queued job with
``schema_version <= v`` in order; the shell calls it

- at start with the checkpoint's schema version (the history up to there),
- before each DML with the binlog's ``PrewriteValue.schema_version``,
- for each DDL binlog with the job's own schema version.

Jobs that are not Done/Synced (cancelled, rolled back) or on DDL system tables
are skipped (``Job.drainer_skips``); a DROP COLUMN job in the DeleteOnly state
only marks the table as dropping a column.

**Actions.** create/drop/alter-charset schema; create table/view/sequence and
recover table create ``binlog.TableInfo``; drop table/view/sequence drop the id;
rename = drop ``table_id`` + create ``binlog.TableInfo`` in ``schema_id``;
truncate = drop the old id (remembered as truncated) + create the new table;
create tables = every ``MultipleTableInfos``; TiFlash/lock/cache/attributes/
placement actions change nothing here; every other action replaces the table's
info under the same id (add/drop/modify column, indexes, partitions, ...).

**Decoding versions.** :meth:`table_at` returns the stored TableInfo to decode a
DML written at schema version ``v``: the oldest kept entry whose version is
``>= v``, else the newest. :meth:`can_append_default` says whether a row may
lack columns (filled with defaults): the table is dropping a column, or the
DML's version is older than the table's last DDL.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from tidb_binlog.errors import SchemaError
from tidb_binlog.model import ActionType, DBInfo, Job, SchemaState, TableInfo

__all__ = ["SchemaKeeper", "KEPT_VERSIONS"]

log = logging.getLogger(__name__)

KEPT_VERSIONS = 2
"""How many (schema_version, TableInfo) entries are kept per table id."""

# Actions that change nothing the drainer decodes with (TiDB Binlog's skip list):
# TiFlash replica status 31, lock/unlock table 27/28, alter table / partition
# attributes 49/50, placement policies 51-56, cache / no-cache table 57/59.
_NO_SCHEMA_CHANGE = frozenset({ActionType.UPDATE_TIFLASH_REPLICA_STATUS, ActionType.LOCK_TABLE,
                               ActionType.UNLOCK_TABLE, 49, 50, 51, 52, 53, 54, 55, 56, 57, 59})
_CREATE_TABLE = frozenset({ActionType.CREATE_TABLE, ActionType.CREATE_VIEW,
                           ActionType.CREATE_SEQUENCE, ActionType.RECOVER_TABLE})
_DROP_TABLE = frozenset({ActionType.DROP_TABLE, ActionType.DROP_VIEW, ActionType.DROP_SEQUENCE})


@dataclass
class SchemaKeeper:
    """Versioned table schemas built from DDL jobs; see the module docstring."""

    schema_version: int = 0
    databases: dict[int, DBInfo] = field(default_factory=dict)
    tables: dict[int, list[tuple[int, TableInfo]]] = field(default_factory=dict)
    table_schema: dict[int, int] = field(default_factory=dict)  # table id -> db id
    truncated: set[int] = field(default_factory=set)
    dropping_column: set[int] = field(default_factory=set)
    table_version: dict[int, int] = field(default_factory=dict)  # last DDL version per table
    _queue: list[Job] = field(default_factory=list)

    # -- jobs ---------------------------------------------------------------------
    @classmethod
    def from_history(cls, jobs, up_to_version: int) -> SchemaKeeper:
        """A keeper with every job queued and those ``<= up_to_version`` applied."""
        keeper = cls()
        for job in sorted(jobs, key=lambda j: j.schema_version):
            keeper.add_job(job)
        keeper.apply_until(up_to_version)
        return keeper

    def add_job(self, job: Job) -> bool:
        """Queue a job; False when its version is not above the last queued/applied one."""
        last = self._queue[-1].schema_version if self._queue else self.schema_version
        if job.schema_version <= last:
            return False
        self._queue.append(job)
        return True

    @property
    def pending_versions(self) -> list[int]:
        return [j.schema_version for j in self._queue]

    def apply_until(self, version: int) -> list[Job]:
        """Apply the queued jobs with ``schema_version <= version``; return them."""
        applied = []
        while self._queue and self._queue[0].schema_version <= version:
            job = self._queue.pop(0)
            self.apply(job)
            applied.append(job)
        return applied

    def apply(self, job: Job) -> None:
        """Apply one finished job (skips unfinished or system-table jobs)."""
        version = job.schema_version
        if version <= self.schema_version:
            log.warning("DDL job %s at schema version %s is not above the current version %s; "
                        "ignored", job.id, version, self.schema_version)
            return
        if job.type == ActionType.DROP_COLUMN and job.schema_state == SchemaState.DELETE_ONLY:
            self.dropping_column.add(job.table_id)
            if job.binlog.table_info is not None:
                self._replace(job.table_id, job.binlog.table_info, version)
            self.schema_version = version
            return
        if job.drainer_skips():
            log.info("skipping DDL job %s (type %s, state %s, table %s)", job.id, job.type,
                     job.state, job.table_id)
            self.schema_version = version
            return
        self._apply_action(job, version)
        if job.type == ActionType.DROP_COLUMN:
            self.dropping_column.discard(job.table_id)
        self.schema_version = version

    def _apply_action(self, job: Job, version: int) -> None:
        info = job.binlog
        tp = job.type
        if tp in (ActionType.CREATE_SCHEMA, ActionType.MODIFY_SCHEMA_CHARSET_AND_COLLATE):
            db = self._require(info.db_info, job, "DBInfo")
            self.databases[db.id] = db
        elif tp == ActionType.DROP_SCHEMA:
            self.databases.pop(job.schema_id, None)
            for tid in [t for t, s in self.table_schema.items() if s == job.schema_id]:
                self._drop(tid)
        elif tp == ActionType.RENAME_TABLE:
            self._drop(job.table_id)
            self._create(job.schema_id, self._require(info.table_info, job, "TableInfo"), version)
        elif tp in _CREATE_TABLE:
            self._create(job.schema_id, self._require(info.table_info, job, "TableInfo"), version)
        elif tp in _DROP_TABLE:
            self._drop(job.table_id)
        elif tp == ActionType.TRUNCATE_TABLE:
            self._drop(job.table_id)
            self.truncated.add(job.table_id)
            self._create(job.schema_id, self._require(info.table_info, job, "TableInfo"), version)
        elif tp == ActionType.CREATE_TABLES:
            for t in info.multiple_table_infos:
                self._create(job.schema_id, t, version)
        elif tp in _NO_SCHEMA_CHANGE:
            pass
        else:
            table = self._require(info.table_info, job, "TableInfo")
            self._replace(table.id, table, version)

    @staticmethod
    def _require(value, job: Job, what: str):
        if value is None:
            raise SchemaError(f"DDL job {job.id} (type {job.type}, query {job.query!r}) carries "
                              f"no {what} in its binlog info; the upstream's history is broken")
        return value

    def _create(self, schema_id: int, table: TableInfo, version: int) -> None:
        if schema_id not in self.databases:
            raise SchemaError(f"table {table.name.O!r} (id {table.id}) is created in unknown "
                              f"schema id {schema_id}")
        self.table_schema[table.id] = schema_id
        self.tables[table.id] = [(version, table)]
        self.table_version[table.id] = version
        self.truncated.discard(table.id)

    def _replace(self, table_id: int, table: TableInfo, version: int) -> None:
        if table_id not in self.tables:
            raise SchemaError(f"DDL at schema version {version} changes table id {table_id}, "
                              "which the schema keeper does not know")
        entries = self.tables[table_id]
        entries.append((version, table))
        del entries[:-KEPT_VERSIONS]
        self.table_version[table_id] = version

    def _drop(self, table_id: int) -> None:
        self.tables.pop(table_id, None)
        self.table_schema.pop(table_id, None)
        self.table_version.pop(table_id, None)
        self.dropping_column.discard(table_id)

    # -- questions --------------------------------------------------------------------
    def table(self, table_id: int) -> TableInfo | None:
        """The newest TableInfo of a table id, or None."""
        entries = self.tables.get(table_id)
        return entries[-1][1] if entries else None

    def table_at(self, table_id: int, schema_version: int) -> TableInfo | None:
        """The TableInfo to decode a DML written at ``schema_version`` (see module doc)."""
        entries = self.tables.get(table_id)
        if not entries:
            return None
        for version, table in entries:
            if version >= schema_version:
                return table
        return entries[-1][1]

    def names(self, table_id: int) -> tuple[str, str]:
        """(database, table) names of a table id; SchemaError when unknown."""
        table = self.table(table_id)
        db = self.databases.get(self.table_schema.get(table_id, -1))
        if table is None or db is None:
            raise SchemaError(f"table id {table_id} is unknown at schema version "
                              f"{self.schema_version}")
        return db.db_name.O, table.name.O

    def database_name(self, schema_id: int) -> str | None:
        db = self.databases.get(schema_id)
        return db.db_name.O if db else None

    def is_truncated(self, table_id: int) -> bool:
        return table_id in self.truncated

    def can_append_default(self, table_id: int, schema_version: int) -> bool:
        """Rows of this DML may lack columns; fill them with defaults."""
        if table_id in self.dropping_column:
            return True
        return schema_version < self.table_version.get(table_id, 0)
