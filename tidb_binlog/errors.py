"""One exception tree for the whole project.

Every error we raise derives from :class:`BinlogError`. Foreign errors are translated
into this tree at the one boundary that talks to the foreign library, with the original
kept as ``__cause__``:

- gRPC: :mod:`tidb_binlog.grpc_errors`, one function per side: ``from_rpc_error`` for
  the callers (pump client, the drainer's pull, the pump's Notify), ``abort`` for the
  servers (the pump's ``binlog.Pump``, the drainer's Cistern);
- pymysql: one boundary per role, since each server is a different party and its
  errors different classes: ``upstream.conn.translate`` (the emulated TiDB's MariaDB:
  :class:`UpstreamError`), ``drainer.sinks.mysql.downstream.translate_error`` (the
  downstream: :class:`DownstreamError`), ``spark_on_ray.sql_task.translate`` (the Spark
  jobs' own sessions: :class:`SparkJobError`); the throwaway test servers'
  (``testing.mariadb``) are :class:`LocalServerError`. All of them read an error's code
  and text and classify it (connection lost, lock conflict, retryable) with
  :mod:`tidb_binlog.mysql_errors`;
- OS and storage libraries: in the storage or file module that opened the file.

::

    BinlogError
    ├── ConfigError                  bad or unknown option in a TOML file or flag
    ├── InvalidArgument              a caller broke the function's contract (also a ValueError)
    ├── CodecError                   malformed datum / row bytes (names offset and flag)
    ├── ProtocolError                malformed binlog or gRPC payload
    │   └── ClusterIDMismatch        "cluster ID are mismatch"
    ├── StorageError                 pump storage (vlog, index), binlog files, the Parquet lake
    │   ├── BadBinlogName            not a binlog file's name (also a ValueError) [binlogfile.files]
    │   ├── CorruptRecord            a vlog / binlog-file record failed magic/length/CRC
    │   │   ├── DamagedBinlog        a pull met an acknowledged binlog it cannot serve (names ts)
    │   │   └── TornTail             a binlog file ends in a record cut short, no writer at it
    │   ├── DiskSpaceError           "no available space" guard
    │   └── PurgedError              a request below gc_ts
    ├── StateError                   an action the node state forbids ("no online: paused")
    ├── PipelineReset                a pipeline actor restarted: replay [drainer.pipeline.gate]
    ├── UnavailableError             no pump / downstream reachable (retryable)
    │   ├── Unimplemented            the peer does not serve this RPC (gRPC UNIMPLEMENTED)
    │   └── PumpClientTimeout        a flush/close wait ran out (also a TimeoutError) [pump_client.inflight]
    ├── SchemaError                  unknown table / schema version, bad DDL job
    │   └── UnsupportedDDL           a DDL we cannot apply (skip with ignore-txn-commit-ts)
    ├── UpstreamError                the upstream (emulated TiDB) refused or failed a statement
    │   ├── UpstreamSchemaError      unknown database/table/column upstream (also a SchemaError)
    │   │   ├── SchemaChanged        "information schema is changed" at commit (retryable)
    │   │   └── UpstreamUnsupportedDDL  a DDL the emulator cannot run (also an UnsupportedDDL)
    │   ├── TxnConflict              deadlock / lock wait timeout: rolled back (retryable)
    │   ├── PumpUnavailable          no pump took the Prewrite binlog: rolled back (retryable)
    │   ├── UpstreamUnreachable      the connection to MariaDB was lost or refused
    │   ├── DDLNotRecorded           a DDL ran in MariaDB but its job/binlogs could not be recorded
    │   ├── FinishTimeout            flush()/close() gave up waiting for Commit binlogs in flight
    │   └── SimulatedCrash           the crash_after_prewrite fault knob fired [upstream.faults]
    ├── DownstreamError              the downstream database refused a statement
    │   └── TransientDownstreamError a retryable downstream failure (lost connection, deadlock)
    ├── TSOError                     the timestamp oracle cannot hand out a timestamp
    ├── LocalServerError             a throwaway local server (MariaDB for tests, demo) failed
    ├── SparkSetupError              no Java, no JDBC jar, too many CPUs [spark_on_ray.errors]
    ├── SparkJobError                a Spark job's input or query failed [spark_on_ray.errors]
    │   └── EventTypeError           a column of mixed kinds [spark_on_ray.lake_plan]
    └── WorkloadFailed               a demo workload thread died [cluster.demo]

A class defined in another module than this one names that module in brackets
(relative to ``tidb_binlog`` for the core); the rest are defined here.

Module-private control-flow exceptions never escape their module (``_Stopped``,
``_RoundFailed``, ``_ZeroDate``: each is caught where it is raised), and the
package-private ones never escape their package: the byte readers' ``Malformed``
(``codec.primitives``, the drainer's ``translate.wire_fields``) become a
:class:`CodecError` or :class:`ProtocolError` naming the offset, the config readers'
``_Bad`` (``config._kinds``) a :class:`ConfigError` naming the key.
``tests/unit/test_errors.py`` checks all of this against the source: no bare
``raise ValueError(...)`` (or TypeError, RuntimeError, ...), no exception class outside
the tree, no private one imported from outside its module or package.

``retryable`` (a class attribute, False unless said) tells a caller whether running
the same operation again may succeed: the transaction or DDL it names was rolled back
completely, so a retry cannot apply anything twice. A class drawn under one parent
may have a second base, named in its line ("also a SchemaError", "also a ValueError"),
so callers that catch the older class keep working.

All classes pickle round trip with their message and extra fields, because Ray
re-raises errors in other processes. Subclasses that add fields must keep the
``__reduce__`` contract: every constructor argument is stored on the instance
under the same name and listed in ``_fields``.
"""

from __future__ import annotations

__all__ = [
    "BinlogError",
    "ConfigError",
    "InvalidArgument",
    "CodecError",
    "ProtocolError",
    "ClusterIDMismatch",
    "StorageError",
    "CorruptRecord",
    "DamagedBinlog",
    "TornTail",
    "DiskSpaceError",
    "PurgedError",
    "StateError",
    "UnavailableError",
    "Unimplemented",
    "SchemaError",
    "UnsupportedDDL",
    "UpstreamError",
    "UpstreamSchemaError",
    "SchemaChanged",
    "UpstreamUnsupportedDDL",
    "TxnConflict",
    "PumpUnavailable",
    "UpstreamUnreachable",
    "DDLNotRecorded",
    "FinishTimeout",
    "DownstreamError",
    "TransientDownstreamError",
    "TSOError",
    "LocalServerError",
]


class BinlogError(Exception):
    """Root of every error this project raises on purpose."""

    _fields: tuple[str, ...] = ()
    retryable: bool = False  # running the same operation again may succeed (see above)

    def __init__(self, message: str = "", **fields):
        super().__init__(message)
        self.message = message
        for name in self._fields:
            setattr(self, name, fields.pop(name, None))
        if fields:
            raise InvalidArgument(f"{type(self).__name__} got unknown fields {sorted(fields)}")

    def __reduce__(self):
        kwargs = {name: getattr(self, name) for name in self._fields}
        return (_rebuild, (type(self), self.message, kwargs))

    def __str__(self) -> str:
        return self.message


def _rebuild(cls, message, kwargs):
    return cls(message, **kwargs)


class ConfigError(BinlogError):
    """A configuration file or flag is wrong: names the key and the file."""

    _fields = ("key", "path")


class InvalidArgument(BinlogError, ValueError):
    """A caller passed a value outside the function's contract (a count below 1, an
    action no caller emits, a reference where bytes were expected): a bug in the caller,
    not something a user typed; a user's option is a :class:`ConfigError`. Also a
    ``ValueError``, so callers written against the builtin keep working."""


class CodecError(BinlogError):
    """Datum or row bytes are malformed: names the byte offset and the flag."""

    _fields = ("offset", "flag")


class ProtocolError(BinlogError):
    """A binlog payload or RPC request is malformed."""


class ClusterIDMismatch(ProtocolError):
    """The request's cluster id is not this cluster's."""

    _fields = ("expected", "got")


class StorageError(BinlogError):
    """The pump's storage (value log or index) or a binlog file directory failed."""


class CorruptRecord(StorageError):
    """A value-log or binlog-file record failed its magic, length or CRC check."""

    _fields = ("path", "offset")


class DamagedBinlog(CorruptRecord):
    """A pull reached a stored binlog it cannot serve (checksum mismatch, or the record
    is not the one the index names): the pull stops there instead of skipping it, so a
    reader never passes the gap unknowingly. ``ts`` is the index key (the pull can
    resume after it only by an operator's decision)."""

    _fields = ("path", "offset", "ts")


class TornTail(CorruptRecord):
    """The newest binlog file ends in a record cut short (a crash mid-write, a copy taken
    while the file was written, bytes lost) and no writer holds the directory's lock, so
    it is no write in progress: the transaction there is missing. ``offset`` is where the
    cut record starts in ``path``; ``commit_ts`` is the last whole record's before it (0:
    none). reparo stops with it unless told to accept the cut (``allow-torn-tail``)."""

    _fields = ("path", "offset", "commit_ts")


class DiskSpaceError(StorageError):
    """Free disk space is below ``stop-write-at-available-space``."""

    _fields = ("available_bytes", "threshold_bytes")


class PurgedError(StorageError):
    """A reader asked for binlogs at or below the garbage-collected ts."""

    _fields = ("requested_ts", "gc_ts")


class StateError(BinlogError):
    """The node's state forbids this action (e.g. a Prewrite while paused)."""

    _fields = ("state",)


class UnavailableError(BinlogError):
    """A peer (pump, registry, downstream) cannot be reached; retrying may help."""

    retryable = True


class Unimplemented(UnavailableError):
    """The peer does not serve this RPC (gRPC ``UNIMPLEMENTED``: another build, TiDB's
    pump without our streaming write). Another peer, or another method, may serve it:
    the pump client fails a plain write over to the next pump and sends a streamed one
    with ``WriteBinlog`` instead."""


class SchemaError(BinlogError):
    """A table, schema version or DDL job is unknown or inconsistent."""


class UnsupportedDDL(SchemaError):
    """A DDL cannot be applied; skip it with ``ignore-txn-commit-ts``."""

    _fields = ("commit_ts", "query")


class UpstreamError(BinlogError):
    """The upstream database (MariaDB behind the TiDB emulator) refused a statement.

    Everything the upstream emulator raises is one of these; ``code`` is MariaDB's
    error number when MariaDB said no (``None`` otherwise)."""

    _fields = ("sql", "code")


class UpstreamSchemaError(UpstreamError, SchemaError):
    """The upstream catalog has no such database, table or column (or a DDL names none).

    Also a :class:`SchemaError`, so code written against the older tree still catches it."""


class SchemaChanged(UpstreamSchemaError):
    """TiDB's "information schema is changed": a DDL altered a table this transaction
    touched, so its commit was refused and it was rolled back; run it again."""

    retryable = True


class UpstreamUnsupportedDDL(UpstreamSchemaError, UnsupportedDDL):
    """A DDL the upstream emulator cannot run; nothing was touched (also an UnsupportedDDL)."""

    _fields = ("sql", "code", "commit_ts", "query")


class TxnConflict(UpstreamError):
    """MariaDB chose this transaction as a deadlock victim (1213) or its lock wait timed
    out (1205): it was rolled back as a whole; run it again."""

    retryable = True


class PumpUnavailable(UpstreamError):
    """No pump took the Prewrite binlog (an outage, or the ``fail_prewrite`` fault knob):
    the transaction was rolled back and a Rollback binlog sent; run it again once a pump
    is back."""

    retryable = True


class UpstreamUnreachable(UpstreamError):
    """The upstream MariaDB could not be reached or the connection was lost mid-statement
    (server gone, restarting, refused).

    Not ``retryable`` in the tree's sense: a connection lost during COMMIT leaves the
    transaction's outcome unknown to the client (the pump resolves its Prewrite from the
    catalog after ``max-txn-timeout``). A read, such as the catalog lookups of pumps and
    drainers (:class:`~tidb_binlog.upstream.meta.UpstreamMeta`), can simply be asked
    again once the server is back, and is."""


class DDLNotRecorded(UpstreamError):
    """A DDL ran in MariaDB but its job and binlogs could not be recorded.

    ``undone`` says whether the emulator reverted the statement in MariaDB (then nothing
    happened and the DDL may be run again); when it is False the message names the table
    and how to repair it, since MariaDB now holds a schema no DDL binlog announced. A
    multi-round job (DROP COLUMN) whose first round was already recorded stays queued in
    the catalog instead: the next ``Upstream.ddl()`` or ``Upstream.resume_ddl_jobs()``
    finishes it under the same job id (do not run the statement again)."""

    _fields = ("sql", "code", "table", "undone")


class FinishTimeout(UpstreamError):
    """``Upstream.flush()``/``close()`` waited ``timeout_s`` and Commit/Rollback binlogs
    were still in flight (``pending``; ``pumps`` names where they were going). The
    transactions themselves are committed or rolled back in MariaDB; a pump resolves a
    Prewrite whose Commit never arrives after ``max-txn-timeout`` from the catalog."""

    _fields = ("sql", "code", "pending", "pumps", "timeout_s")


class DownstreamError(BinlogError):
    """The downstream database refused a statement (permanent)."""

    _fields = ("sql", "code")


class TransientDownstreamError(DownstreamError):
    """The downstream failed in a way that retrying may fix."""

    retryable = True


class TSOError(BinlogError):
    """The timestamp oracle cannot hand out a timestamp."""


class LocalServerError(BinlogError):
    """A throwaway local server (tests, demo) could not be set up, started or stopped."""

    _fields = ("name", "log_path")
