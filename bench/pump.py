"""Pump benchmarks: storage writes, gRPC WriteBinlog vs a bare echo server, pull rates.

    .venv/bin/python bench/pump.py [--seconds 3] [--clients 64] [--procs 4] [--skip-actor]

(a) ``pump_storage_write``: delegated to ``bench/pump_storage.py``'s ``run()``
    (the storage colleague's benchmark) when that file exists.
(b) ``pump_grpc_write``: 64 client threads spread over ``--procs`` client
    processes (one Python process is GIL-bound near 2k calls/s) call WriteBinlog
    with 1 KiB prewrite binlogs (and their commits) on a pump running in a
    child process; the ceiling is the same clients against a bare gRPC server
    in a child process whose WriteBinlog returns an empty response at once
    (same message size, same thread pool). Both servers get the same CPUs, so
    the ratio is the cost of the pump's own work per binlog. p50/p99 are the
    client-observed ack latencies of the pump run.
(c) ``pump_pull_grpc``: one PullBinlogs stream reading ``--pull-pairs``
    commits (1 KiB prewrite values) preloaded into a fresh pump, beside a bare
    gRPC server streaming the same number of same-sized ready-made entities; ``pump_pull_actor``: ``PumpActor.pull`` batches (4 MiB) on a local Ray.

The pump uses the durable ``tidb_binlog.pump.storage.Storage`` (sync-log on)
when it exists, else the in-memory test storage; the RESULT lines say which.
RESULT lines are printed last.
"""

from __future__ import annotations

import argparse
import importlib.util
import multiprocessing as mp
import sys
import tempfile
import threading
import time
import types
from concurrent import futures
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import grpc  # noqa: E402

from tidb_binlog import binlog as bl  # noqa: E402
from tidb_binlog.proto import pump_pb2, pump_pb2_grpc  # noqa: E402

CLUSTER_ID = 1
PAYLOAD_BYTES = 1024


def _durable_storage_available() -> bool:
    return importlib.util.find_spec("tidb_binlog.pump.storage") is not None


def _config(data_dir: str):
    return types.SimpleNamespace(addr="127.0.0.1:0", status_addr="127.0.0.1:0",
                                 data_dir=data_dir, node_id="bench-pump", cluster_id=CLUSTER_ID,
                                 gen_binlog_interval_s=3600.0, registry=None)


class _Echo(pump_pb2_grpc.PumpServicer):
    """The ceilings: WriteBinlog acknowledges at once; PullBinlogs streams ``n``
    ready-made entities as big as the pump's (a 1 KiB-value commit)."""

    def __init__(self, n: int = 0):
        self.n = n

    def WriteBinlog(self, request, context):
        return pump_pb2.WriteBinlogResp()

    def PullBinlogs(self, request, context):
        c = bl.commit(1, 2)
        c.prewrite_value = b"x" * PAYLOAD_BYTES
        c.prewrite_key = b"k"
        payload = bl.encode(c)
        for i in range(self.n):
            yield pump_pb2.PullBinlogResp(entity=pump_pb2.Entity(
                pos=pump_pb2.Pos(offset=i), payload=payload,
                meta=pump_pb2.Meta(startTs=i, commitTs=i)))


def _serve(kind: str, data_dir: str, addr_q, stop_ev, preload_pairs: int = 0) -> None:
    if kind == "echo":
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=128))
        pump_pb2_grpc.add_PumpServicer_to_server(_Echo(preload_pairs), server)
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        addr_q.put(f"127.0.0.1:{port}")
        stop_ev.wait()
        server.stop(0)
        return
    from tidb_binlog.pump.server import open_pump

    storage = None
    if not _durable_storage_available():
        from tidb_binlog.testing.memory_storage import MemoryStorage
        storage = MemoryStorage()
    proc = open_pump(_config(data_dir), storage=storage)
    value = b"x" * PAYLOAD_BYTES
    for i in range(preload_pairs):
        ts = 1000 + 2 * i
        proc.node.storage.write_binlog(bl.prewrite(ts, value, prewrite_key=b"k"))
        proc.node.storage.write_binlog(bl.commit(ts, ts + 1))
    addr_q.put(proc.addr)
    stop_ev.wait()
    proc.stop()


def _start_server(kind: str, data_dir: str, preload_pairs: int = 0):
    ctx = mp.get_context("spawn")
    q, ev = ctx.Queue(), ctx.Event()
    p = ctx.Process(target=_serve, args=(kind, data_dir, q, ev, preload_pairs), daemon=True)
    p.start()
    return p, ev, q.get(timeout=120)


def _client_process(addr: str, threads: int, first_id: int, start_at: float, seconds: float,
                    pairs: bool):
    """One client process: ``threads`` threads writing from ``start_at`` for ``seconds``."""
    value = b"x" * PAYLOAD_BYTES
    counts, lat = [0] * threads, [[] for _ in range(threads)]
    channel = grpc.insecure_channel(addr)
    grpc.channel_ready_future(channel).result(timeout=60)
    end_at = start_at + seconds

    def client(i: int):
        stub = pump_pb2_grpc.PumpStub(channel)
        ts = (first_id + i + 1) << 32
        time.sleep(max(0.0, start_at - time.time()))
        while time.time() < end_at:
            ts += 2
            msgs = [bl.prewrite(ts, value, prewrite_key=b"k")]
            if pairs:
                msgs.append(bl.commit(ts, ts + 1))
            for m in msgs:
                req = pump_pb2.WriteBinlogReq(clusterID=CLUSTER_ID, payload=bl.encode(m))
                t0 = time.perf_counter()
                errmsg = stub.WriteBinlog(req, timeout=30).errmsg
                lat[i].append(time.perf_counter() - t0)
                if errmsg:
                    raise RuntimeError(errmsg)
                counts[i] += 1

    ts_ = [threading.Thread(target=client, args=(i,)) for i in range(threads)]
    for t in ts_:
        t.start()
    for t in ts_:
        t.join()
    channel.close()
    return sum(counts), [x for li in lat for x in li]


def _write_load(addr: str, clients: int, procs: int, seconds: float, pairs: bool):
    """``clients`` threads spread over ``procs`` processes; (binlogs/s, sorted latencies)."""
    ctx = mp.get_context("spawn")
    start_at = time.time() + 3.0          # every process is up and connected by then
    per = [clients // procs + (1 if i < clients % procs else 0) for i in range(procs)]
    with ctx.Pool(procs) as pool:
        outs = pool.starmap(_client_process, [
            (addr, per[i], sum(per[:i]), start_at, seconds, pairs) for i in range(procs)])
    n = sum(o[0] for o in outs)
    return n / seconds, sorted(x for o in outs for x in o[1])


def _pct(sorted_values, q):
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def _pull_grpc(addr: str, expected: int) -> float:
    """Binlogs/s of one PullBinlogs stream reading ``expected`` preloaded commits."""
    with grpc.insecure_channel(addr) as ch:
        stub = pump_pb2_grpc.PumpStub(ch)
        grpc.channel_ready_future(ch).result(timeout=60)
        call = stub.PullBinlogs(pump_pb2.PullBinlogReq(clusterID=CLUSTER_ID))
        n, t0 = 0, time.perf_counter()
        for _ in call:
            n += 1
            if n == expected:
                break
        elapsed = time.perf_counter() - t0
        call.cancel()
        return n / elapsed


def _actor_pull(n_pairs: int) -> tuple[int, float]:
    import ray

    from actors.pump import start_pump_actor
    from tidb_binlog.pump.server import open_channel

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        factory = None
        if not _durable_storage_available():
            from tidb_binlog.testing.memory_storage import memory_storage_factory as factory
        with tempfile.TemporaryDirectory() as d:
            actor = start_pump_actor(_config(d), storage_factory=factory)
            addr = ray.get(actor.address.remote())
            with open_channel(addr) as ch:
                stub = pump_pb2_grpc.PumpStub(ch)
                value = b"x" * PAYLOAD_BYTES
                for i in range(n_pairs):
                    ts = 1000 + 2 * i
                    for m in (bl.prewrite(ts, value, prewrite_key=b"k"), bl.commit(ts, ts + 1)):
                        stub.WriteBinlog(pump_pb2.WriteBinlogReq(clusterID=CLUSTER_ID,
                                                                 payload=bl.encode(m)))
            n, since, t0 = 0, 0, time.perf_counter()
            while n < n_pairs:
                batch, since = ray.get(actor.pull.remote(since, 4 << 20, 0.5))
                n += len(batch)
            elapsed = time.perf_counter() - t0
            ray.kill(actor)
            return n, elapsed
    finally:
        ray.shutdown()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--procs", type=int, default=4, help="client processes (the GIL caps one)")
    ap.add_argument("--pull-pairs", type=int, default=50_000)
    ap.add_argument("--actor-pairs", type=int, default=5_000)
    ap.add_argument("--skip-actor", action="store_true")
    args = ap.parse_args(argv)
    results = []
    storage_kind = "durable" if _durable_storage_available() else "memory"

    storage_bench = ROOT / "bench" / "pump_storage.py"
    if storage_bench.exists():
        spec = importlib.util.spec_from_file_location("pump_storage_bench", storage_bench)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        for line in mod.run(seconds=args.seconds):
            (results.append if str(line).startswith("RESULT") else print)(line)
    else:
        print("bench/pump_storage.py not present: pump_storage_write not measured")

    with tempfile.TemporaryDirectory() as d:
        echo, echo_stop, echo_addr = _start_server("echo", d)
        echo_rate, _ = _write_load(echo_addr, args.clients, args.procs, args.seconds, pairs=False)
        echo_stop.set()
        echo.join(10)
        pump, pump_stop, pump_addr = _start_server("pump", str(Path(d) / "w"))
        rate, lat = _write_load(pump_addr, args.clients, args.procs, args.seconds, pairs=True)
        pump_stop.set()
        pump.join(30)
        pump, pump_stop, pump_addr = _start_server("pump", str(Path(d) / "r"), args.pull_pairs)
        pull_rate = _pull_grpc(pump_addr, args.pull_pairs)
        pump_stop.set()
        pump.join(30)
        echo, echo_stop, echo_addr = _start_server("echo", d, args.pull_pairs)
        stream_rate = _pull_grpc(echo_addr, args.pull_pairs)
        echo_stop.set()
        echo.join(10)
    print(f"gRPC write: {args.clients} client threads in {args.procs} processes, "
          f"{storage_kind} storage, {args.seconds:.0f} s per run")
    results.append(f"RESULT pump_grpc_write value={rate:.0f} unit=binlogs/s "
                   f"ceiling={echo_rate:.0f} ratio={rate / echo_rate:.2f} storage={storage_kind} "
                   f"clients={args.clients}_threads_in_{args.procs}_processes")
    results.append(f"RESULT pump_grpc_p50_ms value={_pct(lat, 0.5) * 1000:.2f} unit=ms")
    results.append(f"RESULT pump_grpc_p99_ms value={_pct(lat, 0.99) * 1000:.2f} unit=ms")
    results.append(f"RESULT pump_pull_grpc value={pull_rate:.0f} unit=binlogs/s "
                   f"ceiling={stream_rate:.0f} ratio={pull_rate / stream_rate:.2f} "
                   f"n={args.pull_pairs}")
    if not args.skip_actor:
        n_act, t_act = _actor_pull(args.actor_pairs)
        results.append(f"RESULT pump_pull_actor value={n_act / t_act:.0f} unit=binlogs/s "
                       f"n={n_act}")
    for line in results:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
