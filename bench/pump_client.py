"""Client CPU per binlog of the pump client, against a real ``tidb-binlog pump`` process.

``--threads`` threads each loop Prewrite (synchronous) + Commit for ``--duration-s``
per mode and round; the pump is a standalone subprocess (``sync-log`` as chosen), so
``time.process_time()`` of this process is the client's CPU alone and ``/proc`` gives
the pump's. Modes, alternating within each round:

- **raw** (the ceiling): the generated gRPC stub called directly with pre-built
  requests, prewrite then commit, both synchronous: Python gRPC's own cost;
- **sync**: ``PumpClient.write_binlog`` for both binlogs;
- **async**: ``write_binlog`` for the prewrite, the commit through a background
  sender that batches whatever queued up into ``write_binlogs`` (what the upstream
  did before ``write_finish_nowait``);
- **nowait**: ``write_binlog`` for the prewrite, ``write_finish_nowait`` for the
  commit (what the upstream does with the pump client).

Prints per mode the median round's binlogs/s and client/pump CPU per binlog, last
``RESULT pump_client_cpu_per_binlog value=<us> unit=us ceiling=<raw us> ratio=<raw/value>``
for the nowait mode (the async one when nowait is not run; ratio 1.0 = no cost above a
bare stub call).

    .venv/bin/python bench/pump_client.py --threads 4 --duration-s 3 --rounds 3
    .venv/bin/python bench/pump_client.py --profile async   # cProfile of one mode
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import queue
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from proc_cpu import proc_cpu_s as _proc_cpu_s  # noqa: E402
from upstream import CLUSTER_ID, start_pump, stop_pump  # noqa: E402

from tidb_binlog import binlog as bl  # noqa: E402
from tidb_binlog.proto import pump_pb2, pump_pb2_grpc  # noqa: E402


def _prewrite_value(start_ts: int) -> bytes:
    """A 1-row sysbench insert as the upstream writes it (~230 bytes)."""
    row = b"\x03" + start_ts.to_bytes(8, "big") + b"\x02" + b"7" * 120 + b"\x02" + b"3" * 60
    mutation = bl.new_table_mutation(101, inserted_rows=[row])
    return bl.encode(bl.new_prewrite_value(5, [mutation]))


class _Ts:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ts = int(time.time() * 1000) << 18

    def next(self) -> int:
        with self._lock:
            self._ts += 1
            return self._ts


# cProfile.Profile objects of the worker threads while --profile is on (one per thread:
# cProfile sees only the thread that enabled it).
PROFILES: list[cProfile.Profile] | None = None


def _run(threads: int, duration_s: float, body) -> int:
    counts = [0] * threads
    deadline = time.monotonic() + duration_s

    def work(i: int) -> None:
        prof = None
        if PROFILES is not None:
            prof = cProfile.Profile(time.thread_time)  # CPU of this thread, not wall
            PROFILES.append(prof)
            prof.enable()
        n = 0
        while time.monotonic() < deadline:
            n += body()
        counts[i] = n
        if prof is not None:
            prof.disable()

    ts = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return sum(counts)


def mode_raw(addr: str, ts: _Ts, threads: int, duration_s: float, finish) -> int:
    import grpc

    channel = grpc.insecure_channel(addr, options=[("grpc.enable_retries", 0)])
    call = pump_pb2_grpc.PumpStub(channel).WriteBinlog
    value = _prewrite_value(0)

    def body() -> int:
        start_ts = ts.next()
        pre = pump_pb2.WriteBinlogReq(clusterID=CLUSTER_ID,
                                      payload=bl.encode(bl.prewrite(start_ts, value)))
        assert call(pre, timeout=5.0).errmsg == ""
        com = pump_pb2.WriteBinlogReq(clusterID=CLUSTER_ID,
                                      payload=bl.encode(bl.commit(start_ts, ts.next())))
        assert call(com, timeout=5.0).errmsg == ""
        return 2

    try:
        return _run(threads, duration_s, body)
    finally:
        channel.close()


def mode_sync(client, ts: _Ts, threads: int, duration_s: float, finish) -> int:
    value = _prewrite_value(0)

    def body() -> int:
        start_ts = ts.next()
        client.write_binlog(bl.prewrite(start_ts, value))
        assert client.write_binlog(bl.commit(start_ts, ts.next())) is not None
        return 2

    return _run(threads, duration_s, body)


def mode_async(client, ts: _Ts, threads: int, duration_s: float, finish) -> int:
    value = _prewrite_value(0)

    def body() -> int:
        start_ts = ts.next()
        client.write_binlog(bl.prewrite(start_ts, value))
        finish.put(bl.commit(start_ts, ts.next()))
        return 2

    n = _run(threads, duration_s, body)
    finish.join()
    return n


def mode_nowait(client, ts: _Ts, threads: int, duration_s: float, finish) -> int:
    """Commit through ``write_finish_nowait`` (what the upstream does now): a gRPC future
    started on the session's thread, finished in gRPC's callback, no thread of ours."""
    value = _prewrite_value(0)
    pending = []

    def body() -> int:
        start_ts = ts.next()
        client.write_binlog(bl.prewrite(start_ts, value))
        pending.append(client.write_finish_nowait(bl.commit(start_ts, ts.next())))
        return 2

    n = _run(threads, duration_s, body)
    for fut in pending:
        result = fut.result(timeout=60)
        assert result.node_id is not None, result
    return n


def _finish_sender(client, q: queue.Queue) -> None:
    while True:
        batch = [q.get()]
        while True:
            try:
                batch.append(q.get_nowait())
            except queue.Empty:
                break
        for r in client.write_binlogs(batch):
            assert r.error is None, r.error
        for _ in batch:
            q.task_done()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--duration-s", type=float, default=3.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-sync-log", action="store_true", help="pump without fdatasync")
    ap.add_argument("--modes", default="raw,sync,async,nowait")
    ap.add_argument("--pipeline-min", type=int, default=None,
                    help="override batch.PIPELINE_MIN_BINLOGS (fewer first attempts go "
                         "as sequential blocking calls)")
    ap.add_argument("--profile", metavar="MODE", help="cProfile one round of MODE and print it")
    args = ap.parse_args()

    global PROFILES
    from tidb_binlog.pump_client import PumpClient, batch

    if args.pipeline_min is not None:
        batch.PIPELINE_MIN_BINLOGS = args.pipeline_min

    modes = {"raw": mode_raw, "sync": mode_sync, "async": mode_async, "nowait": mode_nowait}
    chosen = [args.profile] if args.profile else args.modes.split(",")
    figures: dict[str, list[tuple[float, float, float]]] = {m: [] for m in chosen}
    with tempfile.TemporaryDirectory(prefix="bench-pump-client-") as tmp:
        proc, addr = start_pump(Path(tmp), 0, sync_log=not args.no_sync_log)
        client = PumpClient(None, cluster_id=CLUSTER_ID, pumps=[addr])
        finish: queue.Queue = queue.Queue()
        threading.Thread(target=_finish_sender, args=(client, finish), daemon=True).start()
        ts = _Ts()
        if args.profile:
            PROFILES = []
        try:
            mode_sync(client, ts, args.threads, 0.5, finish)  # warm up channel and pump
            if PROFILES:
                PROFILES.clear()
            for r in range(1 if args.profile else args.rounds):
                for m in chosen:
                    target = addr if m == "raw" else client
                    cpu0, pump0, t0 = time.process_time(), _proc_cpu_s(proc.pid), \
                        time.monotonic()
                    n = modes[m](target, ts, args.threads, args.duration_s, finish)
                    wall = time.monotonic() - t0
                    cpu_us = (time.process_time() - cpu0) / n * 1e6
                    pump_us = (_proc_cpu_s(proc.pid) - pump0) / n * 1e6
                    figures[m].append((n / wall, cpu_us, pump_us))
                    print(f"round {r} {m:5}: {n / wall:8,.0f} binlogs/s  client "
                          f"{cpu_us:6.0f} us/binlog  pump {pump_us:6.0f} us/binlog", flush=True)
                    if PROFILES:
                        pstats.Stats(*PROFILES).sort_stats("tottime").print_stats(30)
        finally:
            client.close()
            stop_pump(proc)
    sync_note = "off" if args.no_sync_log else "on"
    print(f"threads={args.threads} duration_s={args.duration_s} rounds={args.rounds} "
          f"sync-log={sync_note}; medians:")
    med = {}
    for m, rows in figures.items():
        med[m] = [statistics.median(col) for col in zip(*rows, strict=True)]
        print(f"  {m:5}: {med[m][0]:8,.0f} binlogs/s  client {med[m][1]:6.0f} us/binlog  "
              f"pump {med[m][2]:6.0f} us/binlog")
    best = "nowait" if "nowait" in med else "async"
    if best in med and "raw" in med:
        print(f"RESULT pump_client_cpu_per_binlog value={med[best][1]:.0f} unit=us "
              f"ceiling={med['raw'][1]:.0f} ratio={med['raw'][1] / med[best][1]:.2f}")


if __name__ == "__main__":
    main()
