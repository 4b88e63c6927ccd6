"""Recovery from the relay log: bring the downstream to a consistent state without the upstream.

TiDB Binlog's ``drainer/relay.go`` (``feedByRelayLogIfNeed``). A checkpoint with
``consistent = false`` means the last run stopped abnormally: the downstream may hold
part of some transactions (a transaction bigger than ``txn-batch`` is committed in
pieces, rows of one transaction go to several workers). Normally the next run fixes
that by replaying from the checkpoint. When the upstream cannot be reached (the
registry and the pumps are gone), the relay log can do it alone: every transaction a
worker was handed had been fdatasync'ed to the relay log first, so the records above
the checkpoint are a superset of what may be half-applied.

:func:`recover` applies those records in commit order, in safe mode (``REPLACE``,
``DELETE`` + ``REPLACE``: applying a row twice is harmless), through reparo's apply
path (:class:`~tidb_binlog.reparo.apply.MysqlApplier`, passed in), then saves the
checkpoint ``consistent = true`` at the last relayed commit_ts with the schema version
that record carries. The downstream then equals the upstream as of that commit_ts.

**Chunks** (a large transaction applied in chunks with exactly-once off, one record per
chunk, relay/record.py): a transaction is applied only if its last chunk is in the log.
One whose last chunk is missing (the crash came between its chunks) ends the recovery
there (it is the log's last transaction, unless a later run skipped it, e.g. with
``ignore-txn-commit-ts``: then what follows it waits too, so the checkpoint never
passes it), and the checkpoint is then saved **not** consistent: the crashed run may
have applied some of its chunks (each was written here first), so the downstream may
hold part of that transaction, which only the upstream can complete. The next start with the upstream
reachable replays from the checkpoint (the transaction whole again, in safe mode); a
recovery run again meanwhile does the same as this one.

Whether to run it is the caller's decision (:func:`needs_recovery` plus "the upstream
cannot be reached"); nothing here talks to Ray or the registry.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from tidb_binlog.binlogfile.reader import WalkStats
from tidb_binlog.drainer.apply.dml import Txn
from tidb_binlog.drainer.checkpoint.checkpoint import Checkpoint
from tidb_binlog.drainer.checkpoint.store import CheckpointStore, MySQLCheckpointStore
from tidb_binlog.drainer.relay.log import relay_records
from tidb_binlog.drainer.relay.record import record_position, record_schema_version
from tidb_binlog.errors import ConfigError, ProtocolError
from tidb_binlog.reparo.apply import MysqlApplier
from tidb_binlog.reparo.decode import binlog_to_txn, parse_binlog

__all__ = ["recover", "recover_if_needed", "needs_recovery", "RecoverySummary", "Applier"]

log = logging.getLogger(__name__)


class Applier(Protocol):
    """What :func:`recover` applies through (reparo's ``MysqlApplier``)."""

    rows: int
    ddls: int

    def add(self, txn: Txn) -> None: ...

    def finish(self) -> None: ...


@dataclass(frozen=True)
class RecoverySummary:
    """What a recovery did: the checkpoint before and after, what it applied."""

    from_ts: int
    to_ts: int
    records: int
    rows: int
    ddls: int
    schema_version: int
    relay_dir: str
    partial_ts: int = 0  # a chunked transaction whose last chunk was not in the log

    def describe(self) -> str:
        if not self.records:
            return (f"relay log recovery: nothing in {self.relay_dir} above the checkpoint "
                    f"{self.from_ts}; checkpoint marked consistent at {self.to_ts}")
        text = (f"relay log recovery: applied {self.records} record(s) ({self.rows} row "
                f"change(s), {self.ddls} DDL(s)) from {self.relay_dir} in safe mode; the "
                f"checkpoint moved from {self.from_ts} to {self.to_ts}")
        if not self.partial_ts:
            return text + ", consistent"
        return (text + f", NOT consistent: the transaction at commit_ts {self.partial_ts} "
                "was being applied in chunks and its last chunk never reached the relay log, "
                "so the downstream may hold part of it; start the task with the upstream "
                "reachable: it replays that transaction whole from the checkpoint")


def needs_recovery(checkpoint: Checkpoint | None) -> bool:
    """Whether the last run stopped without a consistent checkpoint (a crash, a kill)."""
    return checkpoint is not None and checkpoint.commit_ts > 0 and not checkpoint.consistent


def recover(relay_dir: str | os.PathLike, store: CheckpointStore, applier: Applier
            ) -> RecoverySummary:
    """Replay the relay log above the saved checkpoint and save it consistent (module doc).

    Raises ConfigError when the directory is missing (the wrong ``log-dir``, or another
    machine's), ProtocolError/StorageError naming the record when the log is damaged
    in the middle (a torn last record, cut by the crash, is the end of the log)."""
    path = Path(relay_dir)
    if not path.is_dir():
        raise ConfigError(f"the relay log directory {path} does not exist: [syncer.relay] "
                          "log-dir must name the directory the crashed drainer wrote (on "
                          "this machine)", key="syncer.relay.log-dir")
    cp = store.load()
    if cp is None:
        raise ConfigError("the downstream has no checkpoint: there is nothing to recover; "
                          "start the drainer with the upstream reachable",
                          key="syncer.relay.log-dir")
    last_ts, version, records = cp.commit_ts, cp.schema_version, 0
    partial_ts = _first_partial(path, cp.commit_ts)
    stats = WalkStats()
    for commit_ts, payload in relay_records(path, cp.commit_ts, stats=stats):
        if partial_ts and commit_ts >= partial_ts:
            break
        b = parse_binlog(payload)
        try:
            txn = binlog_to_txn(b)
        except ProtocolError as exc:
            raise ProtocolError(f"relay log {path}: {exc}") from exc
        applier.add(txn)
        records += 1
        last_ts = commit_ts
        carried = record_schema_version(b)
        if carried is not None:
            version = carried
    applier.finish()
    done = dataclasses.replace(cp, commit_ts=last_ts, schema_version=version,
                               consistent=not partial_ts)
    store.save(done)
    summary = RecoverySummary(cp.commit_ts, last_ts, records, applier.rows, applier.ddls,
                              version, str(path), partial_ts)
    if partial_ts:
        log.warning("%s", summary.describe())
    else:
        log.info("%s", summary.describe())
    return summary


def _first_partial(path: Path, after_ts: int) -> int:
    """The first commit_ts above ``after_ts`` of a chunked transaction whose last chunk
    is not in the log (its newest record says more follows; 0: none). A first walk
    reading only the records' top-level fields, so the apply walk knows before a
    transaction's first chunk whether to apply it."""
    first, open_ts = 0, 0
    for _, payload in relay_records(path, after_ts):
        commit_ts, more = record_position(payload)
        if open_ts and commit_ts != open_ts:  # the open one never got its last chunk
            first = first or open_ts
        open_ts = commit_ts if more else 0
    return first or open_ts


def recover_if_needed(settings, upstream_error: Callable[[], str | None]
                      ) -> RecoverySummary | None:
    """The drainer's start-up rule (TiDB's ``feedByRelayLogIfNeed``), None when it does not apply.

    It applies when ``settings.relay_dir`` is set, the downstream checkpoint (the
    table's only row, as TiDB's recovery without PD reads it) is not consistent, and
    ``upstream_error()`` says why the upstream (the registry and its pumps) cannot be
    reached (None: reachable, the task replays from the checkpoint as usual). Then the
    relay log is applied through reparo's apply path in safe mode and the summary is
    returned: the caller exits without starting the task."""
    if not settings.relay_dir or settings.downstream is None:
        return None
    # cluster id 0: the table's only row. Without the registry the cluster id is unknown
    # (drainer.toml's cluster-id is a default, the registry's is the real one).
    store = MySQLCheckpointStore(settings.downstream, 0, schema=settings.checkpoint_schema,
                                 table=settings.checkpoint_table)
    try:
        cp = store.load()
        if not needs_recovery(cp):
            return None
        why = upstream_error()
        if why is None:
            log.info("checkpoint %d is not consistent; the upstream answers, so the task "
                     "replays from it (relay log %s not needed)", cp.commit_ts,
                     settings.relay_dir)
            return None
        log.warning("checkpoint %d is not consistent and the upstream cannot be reached (%s): "
                    "applying the relay log %s", cp.commit_ts, why, settings.relay_dir)
        applier = MysqlApplier(settings.downstream, worker_count=settings.worker_count,
                               txn_batch=settings.txn_batch, safe_mode=True)
        try:
            applier.check()
            return recover(settings.relay_dir, store, applier)
        finally:
            applier.close()
    finally:
        store.close()
