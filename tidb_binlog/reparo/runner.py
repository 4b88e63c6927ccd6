"""The restore: a loaded :class:`~tidb_binlog.config.reparo.ReparoConfig` → files read → print or MySQL.

:func:`run_reparo` is the whole of ``tidb-binlog reparo`` but the argument parsing:

1. pick the segments for ``[start_ts, stop_ts]`` (:mod:`.source`; a missing or empty
   ``data-dir`` fails here, before anything else);
2. for ``mysql``, connect to ``[dest-db]`` once (an unreachable or refusing server fails
   here, before a record is read);
3. read the records in the range in commit order, apply the filter
   (:class:`~tidb_binlog.reparo.filter.TableFilter`), then print them (``print``) or
   decode them (:func:`~tidb_binlog.reparo.decode.binlog_to_txn`) and apply them
   (:class:`~tidb_binlog.reparo.apply.MysqlApplier`);
4. return a :class:`ReparoResult` (what was read, applied, skipped; the damage met).

A record of ``large-record-bytes`` or more (one large upstream transaction) is never held
whole: it comes as a :class:`~tidb_binlog.reparo.decode.LargeRecord` read in place
(:mod:`.source`), its rows are decoded once to check them (a record whose rows do not
decode fails before any of them is applied or printed, as a whole one does), then
decoded again and applied in chunks of ``txn-batch`` × ``worker-count`` rows
(:meth:`~tidb_binlog.reparo.apply.MysqlApplier.add_chunks`) or printed event by event.
What the downstream ends up with is the same as for a whole record.

On a failure after records were applied the error says up to which commit_ts the
downstream holds everything (``start-tso`` for the next run; with ``safe-mode = true`` a
rerun over already-applied rows is harmless). A failure of the read (a damaged record,
:class:`~tidb_binlog.errors.CorruptRecord`; a record that does not decode) is not the
downstream's: every record before it is applied first (the applier finished), so that
commit_ts is the last record before the damage, not wherever the workers happened to be.

**A torn tail** (the newest file ends in a record cut short) ends the read. Everything
before it is applied, then:

- a drainer holds the directory's lock (``.lock``, the
  :class:`~tidb_binlog.binlogfile.Binlogger`'s flock, tested before the read and at the
  cut: :func:`~tidb_binlog.binlogfile.writer_holds_lock`): a write in progress; the
  summary says where the read stopped and the run succeeds;
- else the transaction there is lost (a crash mid-write, a copy cut short):
  :class:`~tidb_binlog.errors.TornTail` naming the file, the offset, the last commit_ts
  read and restored, and what to do; with ``allow-torn-tail`` it is reported in the
  summary instead and the run succeeds.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tidb_binlog.binlogfile import LOCK_FILE, WalkStats, writer_holds_lock
from tidb_binlog.config.reparo import DEST_DB_TLS_SECTION, ReparoConfig
from tidb_binlog.drainer.apply.dml import Txn
from tidb_binlog.drainer.sinks.mysql.downstream import DownstreamConfig
from tidb_binlog.errors import BinlogError, CorruptRecord, TornTail
from tidb_binlog.proto import pb_binlog_pb2 as pb
from tidb_binlog.reparo.apply import MysqlApplier
from tidb_binlog.reparo.decode import LargeRecord, binlog_to_txn
from tidb_binlog.reparo.filter import TableFilter, TableRule
from tidb_binlog.reparo.printer import format_binlog, format_ddl, format_event
from tidb_binlog.reparo.source import read_records, select_segments
from tidb_binlog.security import mysql_ssl
from tidb_binlog.tso import extract_physical

__all__ = ["ReparoResult", "run_reparo", "table_filter", "summary_lines", "torn_tail_message"]

log = logging.getLogger(__name__)


@dataclass
class ReparoResult:
    """What a run did."""

    files: list[str] = field(default_factory=list)   # segments read, in order
    records: int = 0            # records in the range
    filtered: int = 0           # records the filter dropped whole
    applied_txns: int = 0       # transactions printed or applied
    rows: int = 0               # row changes printed or applied
    ddls: int = 0
    large_records: int = 0      # records of large-record-bytes or more, read in place
    first_ts: int = 0           # commit_ts of the first / last record printed or applied
    last_ts: int = 0
    last_read_ts: int = 0       # commit_ts of the last record read in range (filtered too)
    # (file, offset, bytes) of a record cut short at the end of the newest file, and
    # what became of it: "live" (a drainer is writing it), "accepted" (allow-torn-tail)
    # or "error" (TornTail raised)
    torn_tail: tuple[str, int, int] | None = None
    torn_tail_state: str = ""
    corruptions: list[tuple[str, int, str]] = field(default_factory=list)
    seconds: float = 0.0


def table_filter(cfg: ReparoConfig) -> TableFilter:
    return TableFilter(cfg.replicate_do_db,
                       [TableRule(t.db_name, t.tbl_name) for t in cfg.replicate_do_table],
                       cfg.replicate_ignore_db,
                       [TableRule(t.db_name, t.tbl_name) for t in cfg.replicate_ignore_table])


def _ts_text(ts: int) -> str:
    moment = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(extract_physical(ts) / 1000))
    return f"{ts} ({moment} UTC)"


class _Applying:
    """The applier, and whether a call into it is under way: an error raised then is the
    downstream's (or left a transaction half sent), so the records before it are not
    finished again on the way out."""

    __slots__ = ("applier", "busy")

    def __init__(self, applier: MysqlApplier):
        self.applier = applier
        self.busy = False

    def add(self, txn: Txn) -> None:
        self.busy = True
        self.applier.add(txn)
        self.busy = False

    def add_chunks(self, commit_ts: int, chunks) -> int:
        self.busy = True
        rows = self.applier.add_chunks(commit_ts, chunks)
        self.busy = False
        return rows

    def finish(self) -> None:
        self.busy = True
        self.applier.finish()
        self.busy = False


def run_reparo(cfg: ReparoConfig, *, out: Callable[[str], None] | None = None,
               result: ReparoResult | None = None) -> ReparoResult:
    """Run the restore (see the module doc); ``out`` takes the printed lines (default:
    stdout); ``result`` (default: a new one) is filled as the run goes, so a caller
    still has the counts when it raises."""
    started = time.perf_counter()
    result = result if result is not None else ReparoResult()
    picked = select_segments(cfg.data_dir, cfg.start_ts, cfg.stop_ts,
                             skip_corrupt=cfg.skip_corrupt,
                             large_record_bytes=cfg.large_record_bytes)
    result.files = [p.name for _, p in picked]
    log.info("reparo: %s, range [%s, %s], reading %d file(s): %s", cfg.dest_type,
             cfg.start_ts, cfg.stop_ts or "end", len(picked), ", ".join(result.files) or "-")
    writer_live = writer_holds_lock(cfg.data_dir)  # a write may end while the files are read
    filt = table_filter(cfg)
    stats = WalkStats()
    applier = dest = None
    if cfg.dest_type == "mysql":
        d = cfg.dest_db
        applier = MysqlApplier(
            DownstreamConfig(host=d.host, port=d.port, user=d.user, password=d.password,
                             params={"time_zone": d.time_zone} if d.time_zone else {},
                             ssl=mysql_ssl(d.security, DEST_DB_TLS_SECTION),
                             tls_section=DEST_DB_TLS_SECTION),
            worker_count=cfg.worker_count, txn_batch=cfg.txn_batch, safe_mode=cfg.safe_mode)
        dest = _Applying(applier)
    try:
        if applier is not None:
            applier.check()
        emit = out if out is not None else _stdout
        chunk_rows = cfg.txn_batch * cfg.worker_count
        for _, b in read_records(cfg.data_dir, cfg.start_ts, cfg.stop_ts, stats=stats,
                                 skip_corrupt=cfg.skip_corrupt, picked=picked,
                                 large_record_bytes=cfg.large_record_bytes):
            result.records += 1
            result.last_read_ts = b.commit_ts
            result.large_records += isinstance(b, LargeRecord)
            if isinstance(b, LargeRecord) and b.tp == pb.DML:
                if dest is None:
                    done = _print_large(b, filt, emit)
                else:
                    done = _apply_large(b, filt, dest, chunk_rows)
                if done is None:
                    result.filtered += 1
                    continue
                _count(result, b.commit_ts, False, done)
            elif isinstance(b, LargeRecord):  # a DDL: its query is small, read whole
                if dest is None:
                    lines = format_ddl(b.ddl_query(), None if filt.empty else filt.skip)
                    for line in lines:
                        emit(line)
                    txn = b if lines else None
                else:
                    txn = filt.filter_txn(b.txn())
                    if txn is not None:
                        dest.add(txn)
                if txn is None:
                    result.filtered += 1
                    continue
                _count(result, b.commit_ts, True, 0)
            elif dest is None:
                lines = format_binlog(b, None if filt.empty else filt.skip)
                if not lines:
                    result.filtered += 1
                    continue
                for line in lines:
                    emit(line)
                _count(result, b.commit_ts, b.tp == pb.DDL,
                       sum(1 for line in lines if line.startswith("schema: ")))
            else:
                txn = filt.filter_txn(binlog_to_txn(b))
                if txn is None:
                    result.filtered += 1
                    continue
                dest.add(txn)
                _count(result, b.commit_ts, txn.ddl is not None, len(txn.dmls))
            log.debug("sync binlog success ts=%s", _ts_text(b.commit_ts))
        if stats.torn_at is not None and not (cfg.stop_ts and result.last_read_ts >= cfg.stop_ts):
            result.torn_tail = stats.torn_at  # (a cut after the stop leaves the range whole)
            live = writer_live or writer_holds_lock(cfg.data_dir)
            result.torn_tail_state = ("live" if live else
                                      "accepted" if cfg.allow_torn_tail else "error")
        if dest is not None:
            dest.finish()
    except BinlogError as exc:
        _stopped(exc, result, dest)
        raise
    finally:
        if applier is not None:
            applier.close()
        result.corruptions = list(stats.corruptions)
        result.seconds = time.perf_counter() - started
    if result.torn_tail is not None:
        path, offset, _ = result.torn_tail
        if result.torn_tail_state == "error":
            raise TornTail(torn_tail_message(result, cfg), path=path, offset=offset,
                           commit_ts=result.last_read_ts)
        log.warning("reparo: %s", _torn_tail_line(result))
    return result


def _stopped(exc: BinlogError, result: ReparoResult, dest: _Applying | None) -> None:
    """Finish what the read handed on before ``exc`` (unless the applier raised it) and
    say in its message up to where the downstream is restored."""
    if dest is None:
        if result.applied_txns:
            _note(exc, f"every record up to commit_ts {_ts_text(result.last_ts)} is printed")
        return
    read_side = not dest.busy
    if read_side:  # not the downstream's: apply every record before the one that failed
        try:
            dest.finish()
        except BinlogError as later:
            read_side = False
            exc.message = (f"{exc.message}; applying the records before it then failed: "
                           f"{later}")
    if not result.applied_txns:
        if isinstance(exc, CorruptRecord):
            _note(exc, "nothing was applied before it; restore the file from a copy, or "
                       "set skip-corrupt = true to skip the damaged bytes")
        return
    done = dest.applier.applied_ts
    if not done:
        _note(exc, "nothing was fully applied")
    elif read_side and isinstance(exc, CorruptRecord):
        _note(exc, f"every record before the damage is applied, up to commit_ts "
                   f"{_ts_text(done)}; restore the file from a copy and rerun with start-tso "
                   f"= {done + 1}, or set skip-corrupt = true to skip the damaged bytes")
    else:
        _note(exc, f"everything up to commit_ts {_ts_text(done)} is applied; rerun with "
                   f"start-tso = {done + 1}")


def _note(exc: BinlogError, where: str) -> None:
    exc.message = f"{exc.message} [reparo stopped: {where}]"
    exc.args = (exc.message,)


def _next_start(result: ReparoResult, cfg: ReparoConfig) -> str:
    start = result.last_read_ts + 1 if result.last_read_ts else cfg.start_ts
    return f"rerun with start-tso = {start}" if start else "rerun it"


def _after(result: ReparoResult) -> str:
    return (f"after commit_ts {_ts_text(result.last_read_ts)}" if result.last_read_ts
            else "before any record in range")


def torn_tail_message(result: ReparoResult, cfg: ReparoConfig) -> str:
    """TornTail's message: where the cut is, what was restored, what the user can do."""
    path, offset, size = result.torn_tail
    if not result.applied_txns:
        done = "nothing was restored"
    elif cfg.dest_type == "mysql":
        done = f"everything up to commit_ts {_ts_text(result.last_ts)} is applied"
    else:
        done = f"everything up to commit_ts {_ts_text(result.last_ts)} is printed"
    return (f"{path} ends in a record cut short at offset {offset} ({size} bytes "
            f"to the end of the file), {_after(result)}, and no drainer holds "
            f"{Path(cfg.data_dir) / LOCK_FILE}, so it is no write in progress: the "
            f"transaction there is missing from the restore. reparo stopped there; {done}. "
            "If the cut is expected (the drainer crashed while writing it: it drops the cut "
            "record and writes the transaction again when it restarts; or the files were "
            "copied while it wrote), pass --allow-torn-tail (reparo.toml allow-torn-tail = "
            f"true) to accept it; otherwise restore the file from a copy and "
            f"{_next_start(result, cfg)}")


def _torn_tail_line(result: ReparoResult) -> str:
    path, offset, size = result.torn_tail
    if result.torn_tail_state == "live":
        later = (f" (start-tso = {result.last_read_ts + 1})" if result.last_read_ts else "")
        return (f"{path} is being written by a live drainer (it holds the directory's "
                f"{LOCK_FILE}): read up to offset {offset}, {_after(result)}; the record "
                f"being written there is for a later run{later}")
    if result.torn_tail_state == "accepted":
        return (f"torn tail accepted (allow-torn-tail): {path} ends in a record cut short "
                f"at offset {offset} ({size} bytes), {_after(result)}; it is not restored")
    return (f"torn tail: {path} ends in a record cut short at offset {offset} ({size} bytes), "
            f"{_after(result)}; not restored (see the error)")


def _print_large(rec: LargeRecord, filt: TableFilter, emit) -> int | None:
    """Print a large DML record event by event; the events printed (None: none were)."""
    skip = None if filt.empty else filt.skip
    ts = rec.commit_ts
    for i, ev in enumerate(rec.iter_events()):  # every event formats: nothing printed yet
        format_event(ev, i, ts, skip)
    printed = 0
    for i, ev in enumerate(rec.iter_events()):
        lines = format_event(ev, i, ts, skip)
        for line in lines:
            emit(line)
        printed += bool(lines)
    return printed or None


def _apply_large(rec: LargeRecord, filt: TableFilter, applier: _Applying,
                 chunk_rows: int) -> int | None:
    """Apply a large DML record in chunks; the rows applied (None: the filter left none)."""
    for _ in rec.dmls():  # every row decodes: nothing of the record is applied yet
        pass
    chunks = rec.chunks(chunk_rows)
    if not filt.empty:
        chunks = (tuple(d for d in c if not filt.skip(d.database, d.table)) for c in chunks)
    rows = applier.add_chunks(rec.commit_ts, chunks)
    if rows:
        return rows
    if not filt.empty:
        return None
    applier.add(Txn.of_dmls(rec.commit_ts, ()))  # no events: a transaction of nothing
    return 0


def _count(result: ReparoResult, ts: int, is_ddl: bool, rows: int) -> None:
    result.applied_txns += 1
    result.first_ts = result.first_ts or ts
    result.last_ts = ts
    if is_ddl:
        result.ddls += 1
    result.rows += rows


def _stdout(line: str) -> None:
    sys.stdout.write(line + "\n")


def summary_lines(result: ReparoResult) -> list[str]:
    """The closing report (the CLI writes it to stderr, so print output stays clean)."""
    lines = [f"reparo: {result.records} record(s) in range from {len(result.files)} file(s); "
             f"{result.applied_txns} transaction(s) ({result.rows} row change(s), "
             f"{result.ddls} DDL(s)); {result.filtered} filtered out; "
             f"{result.seconds:.1f} s"]
    if result.large_records:
        lines.append(f"reparo: {result.large_records} large record(s) read in place, never "
                     "held whole")
    if result.applied_txns:
        lines.append(f"reparo: commit_ts {_ts_text(result.first_ts)} .. "
                     f"{_ts_text(result.last_ts)}")
    for path, offset, why in result.corruptions:
        lines.append(f"reparo: skipped damaged bytes in {path} at offset {offset} ({why})")
    if result.torn_tail is not None:
        lines.append(f"reparo: {_torn_tail_line(result)}")
    return lines
