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

**Chunks** (a large transaction applied in chunks, one record per chunk,
relay/record.py): a transaction is applied only if its last chunk is in the log, and
only its records from its last chunk 1 on (a transaction written again from its first
chunk after a pipeline reset or a restart: the earlier, unfinished attempt is
superseded, so its rows are not applied twice). One whose last chunk is missing (the
crash came between its chunks) is handled by how its chunks were applied:

- *atomically* (field 18: exactly-once or ``txn-atomic``; every chunk ran in one open
  downstream transaction that only the last chunk commits): none of it was ever
  committed, since the last chunk is written here before it goes to a worker and the
  crash rolled the open transaction back. It is skipped; the recovery applies
  everything else and saves the checkpoint **consistent** at the last whole
  transaction, below it (the next start with the upstream replays it from there);
- *one chunk at a time* (the causality mode): it ends the recovery there (it is the
  log's last transaction, unless a later run skipped it, e.g. with
  ``ignore-txn-commit-ts``: then what follows it waits too, so the checkpoint never
  passes it), and the checkpoint is then saved **not** consistent: the crashed run may
  have applied some of its chunks (each was written here first), so the downstream may
  hold part of that transaction, which only the upstream can complete. The next start
  with the upstream reachable replays from the checkpoint (the transaction whole
  again, in safe mode); a recovery run again meanwhile does the same as this one.

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
from tidb_binlog.drainer.checkpoint.store import CheckpointStore, task_checkpoint_store
from tidb_binlog.drainer.relay.log import relay_records
from tidb_binlog.drainer.relay.record import record_chunk, record_schema_version
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
    # atomically chunked transactions whose last chunk was not in the log: never
    # committed downstream, skipped (the checkpoint stays consistent)
    skipped_ts: tuple[int, ...] = ()

    def describe(self) -> str:
        if not self.records and not self.skipped_ts:
            return (f"relay log recovery: nothing in {self.relay_dir} above the checkpoint "
                    f"{self.from_ts}; checkpoint marked consistent at {self.to_ts}")
        text = (f"relay log recovery: applied {self.records} record(s) ({self.rows} row "
                f"change(s), {self.ddls} DDL(s)) from {self.relay_dir} in safe mode; the "
                f"checkpoint moved from {self.from_ts} to {self.to_ts}")
        if self.skipped_ts:
            text += (f"; skipped the unfinished transaction(s) at commit_ts "
                     f"{', '.join(map(str, self.skipped_ts))}: applied in one downstream "
                     "transaction that its last chunk would have committed, never in the "
                     "relay log, so nothing of it was committed")
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
    plan = _plan(path, cp.commit_ts)
    partial_ts, skip = plan.partial_ts, plan.skip
    stats = WalkStats()
    for index, (commit_ts, payload) in enumerate(relay_records(path, cp.commit_ts,
                                                               stats=stats)):
        if partial_ts and commit_ts >= partial_ts:
            break
        if index in skip:
            continue
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
                              version, str(path), partial_ts, plan.skipped_ts)
    if partial_ts:
        log.warning("%s", summary.describe())
    else:
        log.info("%s", summary.describe())
    return summary


@dataclass(frozen=True)
class _Plan:
    """What the apply walk does (:func:`_plan`): stop at ``partial_ts`` (0: never), skip
    the records whose index (from 0, above the checkpoint) is in ``skip``."""

    partial_ts: int
    skip: frozenset[int]
    skipped_ts: tuple[int, ...]


def _plan(path: Path, after_ts: int) -> _Plan:
    """A first walk over the records above ``after_ts`` reading only their top-level
    fields (module doc, "Chunks"): the first transaction applied one chunk at a time
    whose last chunk is missing (``partial_ts``), the records of atomically chunked
    transactions whose last chunk is missing, and those of a transaction's attempts
    superseded by a later chunk 1 (``skip``), so the apply walk knows before a
    transaction's first record what to do with it. The skipped records of a large
    transaction are a few indices per chunk; a set of them is small."""
    skip: set[int] = set()
    skipped: list[int] = []
    partial = 0
    group_ts, group_start, attempt_start, more, atomic = None, 0, 0, False, False

    def close_group(end: int) -> None:
        nonlocal partial
        if group_ts is None:
            return
        if more:  # its last chunk never reached the log
            if atomic:
                skip.update(range(group_start, end))
                skipped.append(group_ts)
            elif not partial:
                partial = group_ts
        elif attempt_start > group_start:  # written again from chunk 1: the last one counts
            skip.update(range(group_start, attempt_start))

    index = -1
    for index, (_, payload) in enumerate(relay_records(path, after_ts)):
        pos = record_chunk(payload)
        if pos.commit_ts != group_ts:
            close_group(index)
            group_ts, group_start, attempt_start = pos.commit_ts, index, index
        elif pos.chunk == 1:
            attempt_start = index
        more, atomic = pos.more, pos.atomic
    close_group(index + 1)
    return _Plan(partial, frozenset(skip), tuple(skipped))


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
    store = task_checkpoint_store(dataclasses.replace(settings, cluster_id=0))
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
