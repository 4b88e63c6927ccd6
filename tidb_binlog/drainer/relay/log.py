"""RelayLog: the relay log's files, written by the MySQL sink, read back by recovery.

The files are TiDB Binlog's binlog files (:mod:`tidb_binlog.binlogfile`: one writer
per directory under a ``flock``, a torn tail repaired on open) in ``[syncer.relay]
log-dir``, rotated at ``max-file-size`` bytes (10 MiB, TiDB's default). Each record is
:func:`~tidb_binlog.drainer.relay.record.txn_record`.

**Write before apply.** :meth:`RelayLog.append` writes a batch's transactions and
fdatasyncs (the directory too when a file was created) before it returns; the sink
hands the batch to its workers only then. Fake binlogs and skipped transactions
(``None``) are not written. A transaction at or below the last one written is not
written again: after a pipeline reset the merger replays from the checkpoint, and
those transactions are already in the log, whole and in order.

**Chunks.** A large transaction the coordinator applies in chunks (``txn-chunk-rows``)
is written one record per chunk (record.py: fields 16 and 17; 18 when the chunks are
one downstream transaction: exactly-once or txn-atomic), each synced before that chunk
goes to a worker; nothing holds the transaction whole. While
the log ends with a chunk that is not its transaction's last (:attr:`RelayLog.open_ts`),
the chunks of that transaction are written as they come, even the ones already written:
after a pipeline reset (or a restarted task) the replay hands the transaction again
from its first chunk, and rewriting it (the chunk boundaries may differ if
``txn-chunk-rows`` changed) keeps the log's copy whole and in order; recovery applies
a transaction's records from its last chunk 1 on (the earlier attempt is superseded),
in safe mode.

**GC.** :meth:`RelayLog.gc` (called with each *saved* checkpoint, never an in-memory
one: recovery starts from the saved one) removes every file whose last record is at
or below it, except the file being written. A file's last commit_ts is learnt when
it is written, or read once when the log is opened. A file ending inside a chunked
transaction keeps that transaction's commit_ts: it is removed only once a saved
checkpoint passed the whole transaction.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

from tidb_binlog.binlogfile import Binlogger, walk
from tidb_binlog.binlogfile.files import Pos
from tidb_binlog.binlogfile.reader import WalkStats
from tidb_binlog.drainer.apply.dml import Txn
from tidb_binlog.drainer.relay.record import record_position, txn_record

__all__ = ["RelayLog", "relay_records", "DEFAULT_MAX_FILE_SIZE"]

log = logging.getLogger(__name__)

DEFAULT_MAX_FILE_SIZE = 10 << 20
"""``[syncer.relay] max-file-size`` default: 10 MiB (TiDB's)."""


class RelayLog:
    """The writer of one relay log directory (see the module doc)."""

    def __init__(self, directory: str | os.PathLike,
                 max_file_size_bytes: int = DEFAULT_MAX_FILE_SIZE):
        self.dir = Path(directory)
        self._files = Binlogger(self.dir, max_file_size_bytes=max_file_size_bytes)
        self.last_ts = 0        # the newest commit_ts in the log
        # the commit_ts of a transaction written in chunks whose last chunk is not in
        # the log yet (the newest record is one of its chunks, with more to come); 0: none
        self.open_ts = 0
        self._chunk = 0         # the newest chunk number written of open_ts
        self._last_of: dict[int, int] = {}  # file suffix -> its last commit_ts
        for pos, payload in self._files.walk():
            ts, more = record_position(payload)
            self._last_of[pos.suffix] = ts
            if ts >= self.last_ts:
                self.last_ts = ts
                self.open_ts = ts if more else 0
        self.records = 0        # written by this process
        self.removed: list[str] = []

    def append(self, items: Iterable[tuple], *, atomic: bool = False) -> int:
        """Write ``(commit_ts, txn | None, schema_version)`` items durably, and
        ``(commit_ts, txn, schema_version, chunk)`` ones (a large transaction's chunk
        that is not its last, coordinator.py); how many records were written (see the
        module doc for what is skipped). ``atomic``: the chunks are applied as one
        downstream transaction (their records say so, record.py field 18)."""
        payloads, stamps = [], []
        last, open_ts, chunk = self.last_ts, self.open_ts, self._chunk
        for item in items:
            commit_ts, txn, version = item[0], item[1], item[2]
            more = len(item) == 4
            if commit_ts < last or (commit_ts == last and commit_ts != open_ts):
                continue  # in the log already (a replay)
            if commit_ts == open_ts:  # a chunk of the open transaction, maybe its last
                chunk = item[3] if more else chunk + 1
                rows = txn if txn is not None else Txn.of_dmls(commit_ts, ())
                payloads.append(txn_record(commit_ts, rows, version, chunk=chunk, more=more,
                                           atomic=atomic))
            elif more:  # the first chunk of a large transaction
                chunk = item[3]
                payloads.append(txn_record(commit_ts, txn, version, chunk=chunk, more=True,
                                           atomic=atomic))
            elif txn is None or (txn.ddl is None and not txn.dmls):
                continue
            else:
                payloads.append(txn_record(commit_ts, txn, version))
            stamps.append(commit_ts)
            last, open_ts = commit_ts, commit_ts if more else 0
        if not payloads:
            return 0
        positions = self._files.write_many(payloads)
        self._files.sync()
        for pos, commit_ts in zip(positions, stamps, strict=True):  # ascending: last wins
            self._last_of[pos.suffix] = commit_ts
        self.last_ts, self.open_ts, self._chunk = last, open_ts, chunk
        self.records += len(payloads)
        return len(payloads)

    def gc(self, saved_commit_ts: int) -> list[str]:
        """Remove the files (not the one being written) whose every record is at or
        below the saved checkpoint; their names."""
        current = self._files.position.suffix
        done = {s for s, ts in self._last_of.items() if s < current and ts <= saved_commit_ts}
        if not done:
            return []
        # files are removed oldest first and only as a prefix: a file with a later
        # commit_ts before them keeps them (it never happens: files ascend)
        keep_from = min((s for s in self._last_of if s not in done), default=current)
        removed = self._files.gc_by_pos(Pos(keep_from, 0))
        for s in [s for s in self._last_of if s < keep_from]:
            del self._last_of[s]
        if removed:
            log.info("relay log: removed %s (applied up to %d)", ", ".join(removed),
                     saved_commit_ts)
            self.removed.extend(removed)
        return removed

    def files(self) -> list[str]:
        return sorted(p.name for p in self.dir.glob("binlog-*"))

    def close(self) -> None:
        self._files.close()


def relay_records(directory: str | os.PathLike, after_ts: int, *,
                  stats: WalkStats | None = None, strict: bool = True
                  ) -> Iterator[tuple[int, bytes]]:
    """``(commit_ts, record)`` of every relay record above ``after_ts``, in order.
    ``strict``: a damaged record before the end raises ``CorruptRecord`` (a lost
    transaction); a torn last record (cut by a crash mid-write, never handed on) ends it."""
    for _, payload in walk(directory, None, stats=stats, strict=strict):
        ts = record_position(payload)[0]
        if ts > after_ts:
            yield ts, payload
