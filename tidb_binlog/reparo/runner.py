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
rerun over already-applied rows is harmless).
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from tidb_binlog.binlogfile import WalkStats
from tidb_binlog.config.reparo import DEST_DB_TLS_SECTION, ReparoConfig
from tidb_binlog.drainer.apply.dml import Txn
from tidb_binlog.drainer.sinks.mysql.downstream import DownstreamConfig
from tidb_binlog.errors import BinlogError
from tidb_binlog.proto import pb_binlog_pb2 as pb
from tidb_binlog.reparo.apply import MysqlApplier
from tidb_binlog.reparo.decode import LargeRecord, binlog_to_txn
from tidb_binlog.reparo.filter import TableFilter, TableRule
from tidb_binlog.reparo.printer import format_binlog, format_ddl, format_event
from tidb_binlog.reparo.source import read_records, select_segments
from tidb_binlog.security import mysql_ssl
from tidb_binlog.tso import extract_physical

__all__ = ["ReparoResult", "run_reparo", "table_filter"]

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


def run_reparo(cfg: ReparoConfig, *, out: Callable[[str], None] | None = None) -> ReparoResult:
    """Run the restore (see the module doc); ``out`` takes the printed lines (default:
    stdout)."""
    started = time.perf_counter()
    result = ReparoResult()
    picked = select_segments(cfg.data_dir, cfg.start_ts, cfg.stop_ts,
                             skip_corrupt=cfg.skip_corrupt,
                             large_record_bytes=cfg.large_record_bytes)
    result.files = [p.name for _, p in picked]
    log.info("reparo: %s, range [%s, %s], reading %d file(s): %s", cfg.dest_type,
             cfg.start_ts, cfg.stop_ts or "end", len(picked), ", ".join(result.files) or "-")
    filt = table_filter(cfg)
    stats = WalkStats()
    applier = None
    if cfg.dest_type == "mysql":
        d = cfg.dest_db
        applier = MysqlApplier(
            DownstreamConfig(host=d.host, port=d.port, user=d.user, password=d.password,
                             params={"time_zone": d.time_zone} if d.time_zone else {},
                             ssl=mysql_ssl(d.security, DEST_DB_TLS_SECTION),
                             tls_section=DEST_DB_TLS_SECTION),
            worker_count=cfg.worker_count, txn_batch=cfg.txn_batch, safe_mode=cfg.safe_mode)
    try:
        if applier is not None:
            applier.check()
        emit = out if out is not None else _stdout
        chunk_rows = cfg.txn_batch * cfg.worker_count
        for _, b in read_records(cfg.data_dir, cfg.start_ts, cfg.stop_ts, stats=stats,
                                 skip_corrupt=cfg.skip_corrupt, picked=picked,
                                 large_record_bytes=cfg.large_record_bytes):
            result.records += 1
            result.large_records += isinstance(b, LargeRecord)
            if isinstance(b, LargeRecord) and b.tp == pb.DML:
                if applier is None:
                    done = _print_large(b, filt, emit)
                else:
                    done = _apply_large(b, filt, applier, chunk_rows)
                if done is None:
                    result.filtered += 1
                    continue
                _count(result, b.commit_ts, False, done)
            elif isinstance(b, LargeRecord):  # a DDL: its query is small, read whole
                if applier is None:
                    lines = format_ddl(b.ddl_query(), None if filt.empty else filt.skip)
                    for line in lines:
                        emit(line)
                    txn = b if lines else None
                else:
                    txn = filt.filter_txn(b.txn())
                    if txn is not None:
                        applier.add(txn)
                if txn is None:
                    result.filtered += 1
                    continue
                _count(result, b.commit_ts, True, 0)
            elif applier is None:
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
                applier.add(txn)
                _count(result, b.commit_ts, txn.ddl is not None, len(txn.dmls))
            log.debug("sync binlog success ts=%s", _ts_text(b.commit_ts))
        if applier is not None:
            applier.finish()
    except BinlogError as exc:
        if applier is not None and result.applied_txns:
            done = applier.applied_ts
            where = (f"everything up to commit_ts {_ts_text(done)} is applied; rerun with "
                     f"start-tso = {done + 1}" if done else "nothing was fully applied")
            exc.message = f"{exc.message} [reparo stopped: {where}]"
            exc.args = (exc.message,)
        raise
    finally:
        if applier is not None:
            applier.close()
        result.corruptions = list(stats.corruptions)
        result.seconds = time.perf_counter() - started
    return result


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


def _apply_large(rec: LargeRecord, filt: TableFilter, applier: MysqlApplier,
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
    return lines
