"""The sink kinds a replication task can write to: one table, read by everything.

TiDB Binlog's drainer chooses its syncer and its checkpoint by ``[syncer] db-type`` in
several places (``drainer/config.go``, ``drainer/checkpoint``, ``drainer/sync``). Here
one :class:`SinkKind` per sink says everything the rest of the code asks about it:

- config validation (:mod:`tidb_binlog.config.drainer`): which ``db-type`` values name
  it, which ``[syncer.to.checkpoint] type`` values it takes, whether ``exactly-once``,
  ``txn-atomic``, ``[syncer.relay]`` and ``worker-count`` apply;
- :class:`~tidb_binlog.drainer.pipeline.settings.TaskSettings` (its ``sink`` comes
  from here, never from the caller);
- the task start (``cluster/task_start.py``): whether the downstream is checked first,
  and which Ray shell (``actors/<shell>.py``'s ``start_sink_actors``) starts the keeper
  and the sink actor;
- the driver and the CLI: whether a downstream is used, the sink actor's role.

Adding a sink is its own folder under ``tidb_binlog/drainer/sinks/``, a row in
:data:`SINK_KINDS` and one shell module in ``actors/``.

This module imports nothing but the error tree, so the config package, the pipeline
and the CLI can all read it.
"""

from __future__ import annotations

from dataclasses import dataclass

from tidb_binlog.errors import ConfigError

__all__ = ["SinkKind", "SINK_KINDS", "SUPPORTED_DB_TYPES", "TIDB_ONLY_DB_TYPES", "sink_kind",
           "sink_of_db_type"]


@dataclass(frozen=True)
class SinkKind:
    """What the code needs to know about one sink (a row of :data:`SINK_KINDS`)."""

    name: str
    """``TaskSettings.sink``: ``mysql`` (also db-type tidb), ``file``, ``parquet``."""
    db_types: tuple[str, ...]
    """The ``[syncer] db-type`` values that choose it; the first is what the config
    resolves the others to (``pb`` is TiDB Binlog's old name of ``file``; ``tidb``
    stays ``tidb``: it writes through the MySQL sink but keeps its name)."""
    checkpoint: str
    """Where its checkpoint lives: ``downstream`` (the ``tidb_binlog.checkpoint`` row in
    the downstream, or in ``[syncer.to.checkpoint]``'s server when that names another),
    ``savepoint`` (``<data-dir>/savepoint``, or a MySQL/TiDB table when
    ``[syncer.to.checkpoint] type`` says so), ``manifest`` (the lake's manifest)."""
    checkpoint_types: tuple[str, ...]
    """The ``[syncer.to.checkpoint] type`` values it accepts (the first is the default);
    empty: the sink keeps its own checkpoint and the section must stay empty."""
    needs_downstream: bool
    """``[syncer.to]`` host/port/user/password name a database it writes to (checked at
    start, before any actor)."""
    sql_workers: bool
    """It applies through hashed SQL workers (``worker-count``, ``txn-batch``)."""
    exactly_once: bool
    """``[syncer] exactly-once`` is allowed (and is then its default)."""
    txn_atomic: bool
    """``[syncer] txn-atomic`` applies (a file or lake writes whole transactions already)."""
    relay_log: bool
    """``[syncer.relay]`` applies (a relay log in front of the downstream)."""
    keeper: str
    """Which keeper translates its batches: ``row`` (the schema keeper: TiDB rows to
    SQL), ``pb`` (binlog files' pb records), ``parquet`` (typed row changes)."""
    role: str
    """The role of its sink actor in a named task: ``<task>-<role>``."""
    shell: str
    """The Ray shell module whose ``start_sink_actors(...)`` starts the keeper and the
    sink actor (and, for MySQL, the SQL workers)."""
    summary: str
    """One line for ``--help`` and error messages."""

    @property
    def canonical_db_type(self) -> str:
        return self.db_types[0]


SINK_KINDS: dict[str, SinkKind] = {k.name: k for k in (
    SinkKind(name="mysql", db_types=("mysql", "tidb"), checkpoint="downstream",
             checkpoint_types=("mysql", "tidb"), needs_downstream=True, sql_workers=True,
             exactly_once=True, txn_atomic=True, relay_log=True, keeper="row",
             role="coordinator", shell="actors.mysql_sink",
             summary="SQL into MySQL/TiDB through hashed SQL workers"),
    SinkKind(name="file", db_types=("file", "pb"), checkpoint="savepoint",
             checkpoint_types=("file", "mysql", "tidb"), needs_downstream=False,
             sql_workers=False, exactly_once=False, txn_atomic=False, relay_log=False,
             keeper="pb", role="file-sink", shell="actors.file_sink",
             summary="TiDB Binlog's binlog files of pb records (reparo restores them)"),
    SinkKind(name="parquet", db_types=("parquet",), checkpoint="manifest",
             checkpoint_types=(), needs_downstream=False, sql_workers=False,
             exactly_once=False, txn_atomic=False, relay_log=False, keeper="parquet",
             role="parquet-sink", shell="actors.parquet_sink",
             summary="a Parquet change-log lake with a manifest (Spark, pyarrow)"),
)}

TIDB_ONLY_DB_TYPES = ("kafka", "oracle")
"""``db-type`` values TiDB Binlog has and this project does not (yet)."""

SUPPORTED_DB_TYPES: tuple[str, ...] = tuple(
    t for k in SINK_KINDS.values() for t in k.db_types if t != "pb")
"""The ``[syncer] db-type`` values named in docs and messages (``pb`` is accepted as
TiDB Binlog's old name of ``file``)."""

_BY_DB_TYPE = {t: k for k in SINK_KINDS.values() for t in k.db_types}


def sink_kind(db_type: str) -> SinkKind:
    """The kind a ``[syncer] db-type`` (or a ``TaskSettings.sink``) names;
    :class:`~tidb_binlog.errors.ConfigError` for anything else."""
    kind = _BY_DB_TYPE.get(db_type) or SINK_KINDS.get(db_type)
    if kind is None:
        known = ("is TiDB Binlog's but not supported here" if db_type in TIDB_ONLY_DB_TYPES
                 else "is unknown")
        raise ConfigError(f"db-type {db_type!r} {known}; supported: "
                          f"{', '.join(SUPPORTED_DB_TYPES)}", key="syncer.db-type")
    return kind


def sink_of_db_type(db_type: str) -> str:
    """``TaskSettings.sink`` of a ``[syncer] db-type`` (tidb writes through mysql)."""
    return sink_kind(db_type).name
