"""Pump storage write throughput beside a grouped append+fdatasync ceiling.

Both halves run in one process, on the same disk (a temporary directory under
``$TMPDIR`` or ``--dir``), with 64 writer threads:

- *ceiling*: each thread hands a pre-framed record (16-byte header + 1 KiB + the
  ~40 bytes a prewrite adds) to one writer thread that appends every waiting
  record with one ``write`` and one ``os.fdatasync`` and then wakes the group:
  the best a group-committing Python process can do on this disk;
- *storage*: each thread writes prewrite+commit pairs (1 KiB ``prewrite_value``)
  through ``Storage.write_binlog`` (payload pre-encoded as the gRPC server
  passes it), i.e. framing, CRC, group commit, LevelDB indexing and the sorter.

Both count binlogs acknowledged durable per second. Printed last:
``RESULT pump_storage_write value=<binlogs/s> unit=binlogs/s ceiling=<binlogs/s> ratio=<v/c>``.
Run: ``.venv/bin/python bench/pump_storage.py [--seconds 5] [--dir PATH]``.
"""

from __future__ import annotations

import argparse
import itertools
import os
import shutil
import tempfile
import threading
import time

from tidb_binlog import binlog as bl
from tidb_binlog.pump.storage import Storage, StorageOptions
from tidb_binlog.pump.storage.metrics import StorageMetrics
from tidb_binlog.pump.storage.vlog_record import encode_record

__all__ = ["run"]

THREADS = 64
VALUE_BYTES = 1024


def _ceiling(dir_path: str, seconds: float) -> tuple[int, float]:
    """(binlogs, elapsed s) of a minimal grouped append + fdatasync loop."""
    fd = os.open(os.path.join(dir_path, "ceiling.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    record = encode_record(os.urandom(VALUE_BYTES + 40))
    cond = threading.Condition()
    state = {"batch": [], "event": threading.Event(), "stop": False}
    done = [0] * THREADS

    def writer():
        while True:
            with cond:
                while not state["batch"] and not state["stop"]:
                    cond.wait()
                if not state["batch"]:
                    return
                batch, event = state["batch"], state["event"]
                state["batch"], state["event"] = [], threading.Event()
            os.write(fd, b"".join(batch))
            os.fdatasync(fd)
            event.set()

    def client(i, deadline):
        n = 0
        while time.perf_counter() < deadline:
            with cond:
                state["batch"].append(record)
                event = state["event"]
                cond.notify()
            event.wait()
            n += 1
        done[i] = n

    w = threading.Thread(target=writer)
    w.start()
    t0 = time.perf_counter()
    clients = [threading.Thread(target=client, args=(i, t0 + seconds)) for i in range(THREADS)]
    for c in clients:
        c.start()
    for c in clients:
        c.join()
    elapsed = time.perf_counter() - t0
    with cond:
        state["stop"] = True
        cond.notify()
    w.join()
    os.close(fd)
    return sum(done), elapsed


def _storage(dir_path: str, seconds: float) -> tuple[int, float, list[float], dict, float]:
    s = Storage(os.path.join(dir_path, "pump"),
                StorageOptions(stop_write_at_available_space_bytes=0), metrics=StorageMetrics())
    tso = itertools.count(1 << 40, 2)  # next() is atomic under the GIL
    value = os.urandom(VALUE_BYTES)
    done = [0] * THREADS
    latencies: list[list[float]] = [[] for _ in range(THREADS)]

    def client(i, deadline):
        n, lat = 0, latencies[i]
        clock, write = time.perf_counter, s.write_binlog
        while clock() < deadline:
            start = next(tso)
            p = bl.prewrite(start, value, prewrite_key=b"k%d" % start)
            c = bl.commit(start, start + 1)
            t0 = clock()
            write(p, p.SerializeToString())
            t1 = clock()
            write(c, c.SerializeToString())
            lat.append(t1 - t0)
            lat.append(clock() - t1)
            n += 2
        done[i] = n

    t0 = time.perf_counter()
    clients = [threading.Thread(target=client, args=(i, t0 + seconds)) for i in range(THREADS)]
    for c in clients:
        c.start()
    for c in clients:
        c.join()
    elapsed = time.perf_counter() - t0
    t1 = time.perf_counter()
    s.flush(60)
    index_lag_s = time.perf_counter() - t1
    stats = s.stats()
    s.close()
    return sum(done), elapsed, [x for lat in latencies for x in lat], stats, index_lag_s


def run(seconds: float = 5, dir_path: str | None = None, rounds: int = 3) -> list[str]:
    """Run both halves, alternating in ``rounds`` so load drift hits both alike;
    return the report lines (RESULT line last)."""
    base = tempfile.mkdtemp(prefix="bench-pump-storage-", dir=dir_path)
    c_n = c_s = v_n = v_s = 0.0
    lat: list[float] = []
    groups = writes = fsyncs = 0
    lag_s = 0.0
    try:
        for r in range(rounds):
            n, el = _ceiling(base, seconds / rounds)
            c_n, c_s = c_n + n, c_s + el
            n, el, lat_r, stats, lag = _storage(os.path.join(base, f"r{r}"), seconds / rounds)
            v_n, v_s = v_n + n, v_s + el
            lat += lat_r
            groups, writes, fsyncs = (groups + stats["groups"], writes + stats["writes"],
                                      fsyncs + stats["fsyncs"])
            lag_s = max(lag_s, lag)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    lat.sort()
    ceiling, value = c_n / c_s, v_n / v_s

    def pct(q):
        return lat[min(len(lat) - 1, int(q * len(lat)))] * 1000 if lat else float("nan")

    return [
        f"pump_storage_write threads={THREADS} value_bytes={VALUE_BYTES} rounds={rounds} "
        f"load_avg_1m={os.getloadavg()[0]:.1f}",
        f"pump_storage_write_p50_ms value={pct(0.50):.3f} unit=ms",
        f"pump_storage_write_p99_ms value={pct(0.99):.3f} unit=ms",
        f"pump_storage_write groups={groups} binlogs_per_group={writes / max(1, groups):.1f} "
        f"fsyncs={fsyncs} max_index_lag_after_load_s={lag_s:.3f}",
        f"RESULT pump_storage_write value={value:.0f} unit=binlogs/s ceiling={ceiling:.0f} "
        f"ratio={value / ceiling:.3f}",
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--dir", default=None, help="where to write (default: $TMPDIR)")
    args = ap.parse_args()
    for line in run(args.seconds, args.dir):
        print(line, flush=True)


if __name__ == "__main__":
    main()
