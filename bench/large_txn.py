"""One large transaction end to end, and the peak memory it costs each process (one run).

Stands up two throwaway MariaDB servers (upstream behind the TiDB-behaving emulator,
downstream), the registry and two PumpActors (:class:`cluster.launch.LocalCluster`,
``sync-log`` on) and a drainer task (:class:`cluster.drainer.Drainer`, ``--workers``
SQL workers), then inserts ``--rows`` rows in ONE upstream transaction (1000-row
statements) into ``large_txn.lt (id, k, c, pad)`` whose ``c`` is sized so a row holds
about ``--row-bytes`` bytes of data, commits it, and waits until the drainer's checkpoint
passes its commit_ts (the row count downstream is then checked).

Timings:

- ``insert_s``: the statements inside the transaction (before commit);
- ``commit_s``: ``Txn.commit()``: the Prewrite binlog write (``prewrite_s``, the pump
  client's ``write_binlog``), commit_ts, COMMIT, the Commit binlog handed over;
- ``apply_s``: from commit's return until the drainer's checkpoint reaches commit_ts;
- ``first_apply_s``: from commit's return until the first downstream commit of the
  transaction's rows (the coordinator's apply samples).

Memory: before the transaction every process's peak RSS (``VmHWM``) is reset through
``/proc/<pid>/clear_refs`` (falling back to sampling ``VmRSS`` every 50 ms where that is
refused) and its ``VmRSS`` noted; afterwards growth = peak - that baseline, printed per
process kind (``upstream`` is this driver process, which runs the emulator and the pump
client; Ray actors by class name: ``PumpActor``, ``MergerActor``, ``SchemaKeeperActor``,
``CoordinatorActor``, each ``SqlWorkerActor``) as MB and as a multiple of the data size.
``data_mb`` is the Prewrite binlog's encoded size (its ``ByteSize()``, or the
size handed to ``write_prewrite_from``: the row data as
TiDB's row format encodes it, plus a few bytes of framing per row); ``pump_vlog_mb`` the
pumps' value logs at the end (a Prewrite stored more than once shows here). A failed
commit is reported (``FAILED=<error>``) with the memory up to then.

Prints, last::

    RESULT large_txn sink=<s> loopback=<0|1> rows=<n> data_mb=<mb> commit_s=<s> apply_s=<s> first_apply_s=<s>
    RESULT large_txn_mem <kind>=<x>x ...   (peak RSS growth / data size, per process)
    RESULT large_txn_private <kind>=<x>x ...   (the same of RssAnon, private memory only:
                                               no object-store pages; sampled every 50 ms)

    .venv/bin/python bench/large_txn.py --rows 1000000            # ~200 MB of row data
    .venv/bin/python bench/large_txn.py --rows 2000000 --workers 2
    .venv/bin/python bench/large_txn.py --rows 1000000 --txn-chunk-rows 0   # unchunked
    .venv/bin/python bench/large_txn.py --rows 1000000 --no-exactly-once    # causality mode
    .venv/bin/python bench/large_txn.py --rows 1000000 --large-binlog-bytes 0  # no refs
    .venv/bin/python bench/large_txn.py --rows 1000000 --keeper-only [--trace]
    .venv/bin/python bench/large_txn.py --rows 1000000 --sink parquet [--txn-chunk-rows 0]
    .venv/bin/python bench/large_txn.py --rows 1000000 --sink file
    .venv/bin/python bench/large_txn.py --rows 1000000 --loopback-control   # loop verdict
    .venv/bin/python bench/large_txn.py --rows 300000 --relay     # exactly-once + relay log
    .venv/bin/python bench/large_txn.py --rows 300000 --txn-atomic --no-exactly-once

``--relay [DIR]``: ``[syncer.relay] log-dir`` (DIR, or ``relay`` under the work dir): the
keeper does not route, the coordinator writes every transaction (each chunk) to the
relay log before applying it. ``--txn-atomic``: ``[syncer] txn-atomic = true``. With
either, chunks are applied atomically (one worker, one open downstream transaction).

``--large-binlog-bytes`` (default 8 MiB): the drainer's ``[syncer] large-binlog-bytes``:
the transaction's Commit binlog goes pump → keeper by reference (the merger never holds
it, the keeper reads it in ranges); ``0``: whole, as before. ``refs`` / ``ref_reads``:
what the keeper read that way.

``--keeper-only``: the schema keeper alone, in this process (:func:`keeper_only`).
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from proc_cpu import ours, processes  # noqa: E402  (bench/proc_cpu.py: the actor pids)

DB = "large_txn"
MB = 1 << 20


def _status_kb(pid: int, field: str) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


class PeakRss:
    """Peak RSS growth of a set of processes over a window (see the module docstring)."""

    def __init__(self, pids: dict[int, str]):
        self.pids = pids
        self.base = {pid: _status_kb(pid, "VmRSS") for pid in pids}
        self.sampled = dict(self.base)
        # private memory alone (RssAnon: no object-store or file pages), sampled
        self.anon_base = {pid: _status_kb(pid, "RssAnon") for pid in pids}
        self.anon = dict(self.anon_base)
        self.hwm_reset: set[int] = set()
        for pid in pids:
            try:
                with open(f"/proc/{pid}/clear_refs", "w") as f:
                    f.write("5")  # resets VmHWM to the current RSS (Linux >= 4.0)
                self.hwm_reset.add(pid)
            except OSError:
                pass
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True, name="rss-sampler")
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(0.05):
            for pid in self.pids:
                self.sampled[pid] = max(self.sampled[pid], _status_kb(pid, "VmRSS"))
                self.anon[pid] = max(self.anon[pid], _status_kb(pid, "RssAnon"))

    def private(self) -> dict[int, float]:
        """pid -> peak growth of its private memory (RssAnon, sampled every 50 ms: a
        shorter spike can be missed) in bytes, after :meth:`stop`."""
        return {pid: max(self.anon[pid] - self.anon_base[pid], 0) * 1024.0
                for pid in self.pids}

    def stop(self) -> dict[int, float]:
        """pid -> peak growth in bytes."""
        self._stop.set()
        self._thread.join()
        out = {}
        for pid in self.pids:
            peak = self.sampled[pid]
            if pid in self.hwm_reset:
                peak = max(peak, _status_kb(pid, "VmHWM"))
            out[pid] = max(peak - self.base[pid], 0) * 1024.0
        return out


def rows_of(n: int, row_bytes: int):
    """``n`` rows of about ``row_bytes`` bytes of data each (k INT, c, pad CHAR(60))."""
    import random
    import string

    rng = random.Random(7)
    c_len = max(row_bytes - 72, 1)
    chunk = "".join(rng.choices(string.ascii_letters + string.digits, k=c_len + 4096))
    pad = "".join(rng.choices(string.digits, k=59))
    for i in range(n):
        off = i % 4096
        yield {"k": i, "c": chunk[off:off + c_len], "pad": pad}


def keeper_only(rows: int, row_bytes: int, chunk_rows: int, trace: bool = False,
                exactly_once: bool = True) -> str:
    """The schema keeper's peak memory for one large transaction, in this process (no Ray,
    no servers): a Commit binlog of ``rows`` inserts of about ``row_bytes`` bytes each
    (TiDB's row format, as the pump serves it), packed as the merger hands it on, through
    :meth:`RowKeeper.translate_routed` (``exactly_once`` false: :meth:`RowKeeper.translate_more`,
    the causality mode) until it answers no ``more`` (each call's result
    dropped, as the actor's are once returned). Peak RSS growth (VmHWM, reset first)
    over the RSS before the packed batch was built, as a multiple of the binlog's size;
    with ``trace`` also tracemalloc's peak of Python allocations (slower; it tells what
    Python holds from what glibc keeps)."""
    import gc
    import tracemalloc

    from tidb_binlog.codec import Datum, encode_old_row, encode_value
    from tidb_binlog.codec import mysql as m
    from tidb_binlog.drainer.pipeline.settings import TaskSettings
    from tidb_binlog.drainer.translate.row_keeper import RowKeeper
    from tidb_binlog.model import (
        ActionType,
        CIStr,
        ColumnInfo,
        DBInfo,
        FieldType,
        HistoryInfo,
        Job,
        JobState,
        SchemaState,
        TableInfo,
    )
    from tidb_binlog.packed import pack
    from tidb_binlog.upstream.prewrite_payload import prewrite_payload

    def col(cid, name, tp, flag=0, flen=-1, charset="utf8mb4"):
        return ColumnInfo(id=cid, name=CIStr(name), offset=cid - 1, type=FieldType(
            tp=tp, flag=flag, flen=flen, decimal=0, charset=charset, collate="utf8mb4_bin"))

    def job(job_id, tp, version, *, db=None, table=None):
        return Job(id=job_id, type=tp, schema_id=2, table_id=table.id if table else 0,
                   state=JobState.SYNCED, schema_state=SchemaState.PUBLIC, query="",
                   binlog=HistoryInfo(schema_version=version, db_info=db, table_info=table))

    table = TableInfo(id=10, name=CIStr("lt"), pk_is_handle=True, max_col_id=4, cols=[
        col(1, "id", m.TYPE_LONGLONG, m.PRI_KEY_FLAG | m.NOT_NULL_FLAG, 20, "binary"),
        col(2, "k", m.TYPE_LONG, m.NOT_NULL_FLAG, 11, "binary"),
        col(3, "c", m.TYPE_VARCHAR, m.NOT_NULL_FLAG, 1024),
        col(4, "pad", m.TYPE_STRING, m.NOT_NULL_FLAG, 60)])
    jobs = [job(1, ActionType.CREATE_SCHEMA, 1, db=DBInfo(id=2, db_name=CIStr(DB))),
            job(2, ActionType.CREATE_TABLE, 2, table=table)]

    class Meta:
        def history_jobs(self, up_to_schema_version=None):
            return list(jobs)

        def job(self, job_id):
            return next((j for j in jobs if j.id == job_id), None)

    class Mutation:  # what PrewriteEncoder reads of the capture's per-table records
        table_id = 10
        updated: list = []
        deleted: list = []

    c_len = max(row_bytes - 72, 1)
    pad = "p" * 59
    mut = Mutation()
    mut.inserted = [encode_value([Datum.int64(i)]) + encode_old_row(
        [2, 3, 4], [Datum.int64(i), Datum.string(f"{i:0{c_len}d}"[-c_len:]),
                    Datum.string(pad)]) for i in range(rows)]
    mut.sequence = [0] * rows
    payload = prewrite_payload(99, 2, [mut], b"k")
    del mut
    # the pump serves the Commit with the Prewrite's value spliced in: tp Commit, commit_ts
    payload = payload.replace(b"\x08\x00\x10", b"\x08\x01\x10", 1)
    payload = payload.replace(b"\x18\x00", b"\x18\x64", 1)  # commit_ts 100 (start_ts 99)
    size = len(payload)
    keeper = RowKeeper(TaskSettings(cluster_id=1, worker_count=2, txn_chunk_rows=chunk_rows,
                                    exactly_once=exactly_once), Meta(), 2)
    keeper.reset(2)
    gc.collect()
    _release()
    pid = os.getpid()
    peak = PeakRss({pid: "keeper"})
    if trace:
        tracemalloc.start()
    t0 = time.perf_counter()
    items = pack([(100, payload)])
    del payload
    calls, n = 0, 0
    more = True
    while more:
        if exactly_once:
            out = keeper.translate_routed(items if calls == 0 else pack([]), 2)
            more = out[-1]
            n += len(out[1]) + len(out[2])
        else:
            out, more = keeper.translate_more(items if calls == 0 else pack([]))
        calls += 1
        del out
        if calls == 1:
            del items
    elapsed = time.perf_counter() - t0
    traced = tracemalloc.get_traced_memory()[1] if trace else 0
    tracemalloc.stop()
    growth = peak.stop()[pid]
    return (f"RESULT keeper_only rows={rows} data_mb={size / MB:.1f} chunk_rows={chunk_rows} "
            f"exactly_once={exactly_once} "
            f"calls={calls} s={elapsed:.1f} peak_rss={growth / size:.2f}x "
            f"peak_traced={traced / size:.2f}x")


def _release() -> None:
    """glibc's malloc_trim(0): what freed memory the allocator kept goes back to the OS."""
    import ctypes

    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:
        pass


def main(argv=None) -> int:
    import ray

    from cluster.drainer import Drainer
    from cluster.launch import LocalCluster
    from tidb_binlog.binlog_ref import DEFAULT_REF_ABOVE_BYTES
    from tidb_binlog.config import load_drainer_config
    from tidb_binlog.testing.mariadb import MariaDBServer
    from tidb_binlog.upstream import Upstream

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=1_000_000, help="rows in the one transaction")
    p.add_argument("--row-bytes", type=int, default=200,
                   help="data bytes per row (c is sized to fit; at least ~80)")
    p.add_argument("--workers", type=int, default=2, help="syncer.worker-count")
    p.add_argument("--txn-batch", type=int, default=1000, help="syncer.txn-batch")
    p.add_argument("--no-exactly-once", action="store_true",
                   help="syncer.exactly-once = false (the causality mode: chunks applied "
                        "non-atomically)")
    p.add_argument("--txn-chunk-rows", type=int, default=50_000,
                   help="syncer.txn-chunk-rows (0: the transaction decoded and applied whole)")
    p.add_argument("--large-binlog-bytes", type=int, default=DEFAULT_REF_ABOVE_BYTES,
                   help="syncer.large-binlog-bytes (0: the pumps send every binlog whole)")
    p.add_argument("--sink", choices=["mysql", "file", "parquet"], default="mysql",
                   help="syncer.db-type: the drainer writes the downstream MariaDB (default), "
                        "the file sink's binlog files or the Parquet lake (both in the work "
                        "dir; the parquet row count is checked through the manifest)")
    p.add_argument("--loopback-control", action="store_true",
                   help="syncer.loopback-control = true (channel-id 1; MySQL sink): the "
                        "keeper takes the loop verdict on the large transaction before its "
                        "first chunk")
    p.add_argument("--relay", nargs="?", const="", default=None, metavar="DIR",
                   help="[syncer.relay] log-dir = DIR (default: relay under the work dir): "
                        "every transaction, each chunk, written there before it is applied")
    p.add_argument("--txn-atomic", action="store_true",
                   help="[syncer] txn-atomic = true (each upstream transaction one "
                        "downstream transaction)")
    p.add_argument("--work-dir", default=None)
    p.add_argument("--no-drainer", action="store_true",
                   help="only upstream and pumps (no drainer task; apply is not timed)")
    p.add_argument("--keeper-only", action="store_true",
                   help="only the schema keeper's translate_routed, in this process (no Ray, "
                        "no servers): its peak memory for a binlog of --rows rows")
    p.add_argument("--trace", action="store_true",
                   help="with --keeper-only: tracemalloc's peak too (slower)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    if args.keeper_only:
        print(keeper_only(args.rows, args.row_bytes, args.txn_chunk_rows, args.trace,
                          not args.no_exactly_once))
        return 0

    base = Path(args.work_dir or tempfile.mkdtemp(prefix="bench-large-txn-"))
    ray.init(address="local", num_cpus=4, include_dashboard=False, log_to_driver=False,
             namespace="bench-large-txn", object_store_memory=300 << 20)
    up_db = MariaDBServer(base, name="lt-up").start()
    down_db = MariaDBServer(base, name="lt-down").start()
    cluster = LocalCluster(base / "cluster", pumps=2, upstream_params=up_db.params(),
                           namespace="bench-large-txn").start()
    client = cluster.pump_client()
    upstream = Upstream(up_db.params(), client, cluster.get_ts)
    drainer = None
    lines = []
    try:
        upstream.ddl(f"CREATE DATABASE {DB}")
        c_len = max(args.row_bytes - 72, 1)
        upstream.ddl(f"CREATE TABLE lt (id BIGINT PRIMARY KEY AUTO_INCREMENT, k INT NOT NULL, "
                     f"c VARCHAR({max(c_len, 1)}) NOT NULL, pad CHAR(60) NOT NULL)", DB)
        if not args.no_drainer:
            if args.sink == "mysql":
                to = {"syncer.to.host": down_db.host, "syncer.to.port": down_db.port,
                      "syncer.to.user": down_db.user, "syncer.to.password": down_db.password}
            else:  # the files or the lake under the work dir
                to = {"syncer.db-type": args.sink, "data-dir": str(base / "drainer"),
                      "syncer.to.dir": str(base / f"drainer-{args.sink}")}
            drainer = Drainer.start(load_drainer_config(None, {
                **to, "syncer.worker-count": args.workers, "syncer.txn-batch": args.txn_batch,
                "syncer.txn-chunk-rows": args.txn_chunk_rows, "initial-commit-ts": 0,
                # exactly-once is the MySQL sink's: the file and Parquet sinks refuse it
                **({"syncer.exactly-once": not args.no_exactly_once}
                   if args.sink == "mysql" else {}),
                "syncer.large-binlog-bytes": args.large_binlog_bytes,
                **({"syncer.loopback-control": True, "syncer.channel-id": 1}
                   if args.loopback_control else {}),
                **({"syncer.relay.log-dir": args.relay or str(base / "relay")}
                   if args.relay is not None else {}),
                **({"syncer.txn-atomic": True} if args.txn_atomic else {}),
                "addr": "127.0.0.1:0"}), registry=cluster.registry)
            ddl_ts = cluster.get_ts()
            while True:  # the task runs and has applied the DDL: its actors are settled
                st = drainer.status()
                if st["state"] == "failed":
                    raise RuntimeError(f"drainer failed: {st['error']}")
                if st["state"] == "running" and st["checkpoint_commit_ts"] >= ddl_ts:
                    break
                time.sleep(0.1)
        pids = {pid: kind for pid, kind in ours(processes()).items() if "Actor" in kind}
        pids[os.getpid()] = "upstream"
        prewrite = {}
        write_binlog = client.write_binlog

        def timed_write(binlog):
            if binlog.tp == 0 and binlog.start_ts:  # the Prewrite
                prewrite["bytes"] = binlog.ByteSize()  # no copy of the payload
                t0 = time.perf_counter()
                try:
                    return write_binlog(binlog)
                finally:
                    prewrite["s"] = time.perf_counter() - t0
            return write_binlog(binlog)

        write_parts = getattr(client, "write_prewrite_parts", None)

        def timed_parts(start_ts, parts):
            prewrite["bytes"] = sum(len(p) for p in parts)
            t0 = time.perf_counter()
            try:
                return write_parts(start_ts, parts)
            finally:
                prewrite["s"] = time.perf_counter() - t0

        write_from = getattr(client, "write_prewrite_from", None)

        def timed_from(start_ts, size, fill):
            prewrite["bytes"] = size
            t0 = time.perf_counter()
            try:
                return write_from(start_ts, size, fill)
            finally:
                prewrite["s"] = time.perf_counter() - t0

        # the emulator calls writer.write_prewrite_from (or _parts) when there is one,
        # else write_binlog
        client.write_binlog = timed_write
        if write_parts is not None:
            client.write_prewrite_parts = timed_parts
        if write_from is not None:
            client.write_prewrite_from = timed_from
        def lake_ts() -> int:
            # deferred like the imports above (the bench's start-up)
            from tidb_binlog.drainer.sinks.parquet.manifest import read_manifest

            m = read_manifest(base / "drainer-parquet")
            return m.commit_ts if m is not None else 0

        peak = PeakRss(pids)
        t0 = time.perf_counter()
        failed = None
        with upstream.session(DB) as s:
            txn = s.begin()
            n = txn.insert("lt", rows_of(args.rows, args.row_bytes))
            t1 = time.perf_counter()
            try:
                commit_ts = txn.commit()
            except Exception as exc:  # noqa: BLE001 - reported as the result, with the memory
                failed = exc
        t2 = time.perf_counter()
        commit_wall = time.time()
        insert_s, commit_s = t1 - t0, t2 - t1
        data = prewrite.get("bytes", 0)
        print(f"upstream: {n} rows inserted in {insert_s:.1f} s, commit {commit_s:.2f} s "
              f"(prewrite write {prewrite.get('s', 0):.2f} s, {data / MB:.1f} MB)", flush=True)
        apply_s = first_s = 0.0
        if failed is not None:
            print(f"commit failed after {commit_s:.1f} s: {failed}", flush=True)
            time.sleep(2.0)  # let the pumps finish what they were writing: it counts too
        elif drainer is not None:
            while True:
                st = drainer.status()
                if st["state"] == "failed":
                    raise RuntimeError(f"drainer failed: {st['error']}")
                if st["checkpoint_commit_ts"] >= commit_ts and (
                        args.sink != "parquet" or lake_ts() >= commit_ts):
                    break  # the lake's checkpoint is its manifest (the status: what came in)
                time.sleep(0.1)
            apply_s = time.perf_counter() - t2
            samples = ray.get(drainer.coordinator.apply_samples.options(
                concurrency_group="status").remote())  # the file and Parquet sinks: none
            after = [at for _, at in samples if at >= commit_wall]
            first_s = (min(after) - commit_wall) if after else apply_s
        growth = peak.stop()
        private = peak.private()
        refs = {}
        if drainer is not None:  # the keeper's reads of binlogs served by reference
            refs = ray.get(drainer.keeper.ref_stats.remote())
            print(f"keeper: {refs.get('refs', 0)} binlogs read by reference, "
                  f"{refs.get('reads', 0)} reads, {refs.get('bytes', 0) / MB:.1f} MB",
                  flush=True)
        if drainer is not None and failed is None and args.sink != "file":
            if args.sink == "parquet":  # the lake's committed rows of the table
                # deferred like the imports above (the bench's start-up)
                from tidb_binlog.drainer.sinks.parquet.manifest import read_manifest

                got = sum(f["rows"] for f in read_manifest(base / "drainer-parquet").files
                          if f["table"] == "lt")
            else:
                with down_db.connect() as conn, conn.cursor() as cur:
                    cur.execute(f"SELECT COUNT(*) FROM {DB}.lt")
                    got = cur.fetchone()[0]
            if got != n:
                raise RuntimeError(f"downstream has {got} rows, expected {n}")
        mem = []
        counts: dict[str, int] = {}
        for pid, kind in sorted(pids.items(), key=lambda kv: kv[1]):
            counts[kind] = counts.get(kind, 0) + 1
            label = kind if list(pids.values()).count(kind) == 1 else f"{kind}{counts[kind]}"
            mem.append((label, growth[pid], private[pid]))
            print(f"  {label:<20} pid {pid:>7}: peak RSS +{growth[pid] / MB:8.1f} MB "
                  f"= {growth[pid] / max(data, 1):5.2f}x the data (private "
                  f"{private[pid] / max(data, 1):5.2f}x)", flush=True)
        vlog = sum(f.stat().st_size for f in (base / "cluster").glob("pump-*/value/*.vlog"))
        lines.append(f"RESULT large_txn sink={args.sink} relay={int(args.relay is not None)} "
                     f"txn_atomic={int(args.txn_atomic)} loopback={int(args.loopback_control)} "
                     f"exactly_once={int(not args.no_exactly_once)} "
                     f"txn_chunk_rows={args.txn_chunk_rows} "
                     f"rows={n} data_mb={data / MB:.1f} insert_s={insert_s:.1f} "
                     f"commit_s={commit_s:.2f} prewrite_s={prewrite.get('s', 0):.2f} "
                     f"apply_s={apply_s:.2f} first_apply_s={first_s:.2f} "
                     f"pump_vlog_mb={vlog / MB:.0f} refs={refs.get('refs', 0)} "
                     f"ref_reads={refs.get('reads', 0)}"
                     + (f" FAILED={type(failed).__name__}" if failed is not None else ""))
        lines.append("RESULT large_txn_mem " + " ".join(
            f"{label}={g / max(data, 1):.2f}x" for label, g, _ in mem))
        lines.append("RESULT large_txn_private " + " ".join(
            f"{label}={p / max(data, 1):.2f}x" for label, _, p in mem))
    finally:
        if drainer is not None:
            drainer.stop()
        upstream.close()
        cluster.stop()
        down_db.close()
        up_db.close()
        ray.shutdown()
        if not args.work_dir:
            shutil.rmtree(base, ignore_errors=True)
    for line in lines:
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
