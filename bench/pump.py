"""Pump benchmarks: storage writes, gRPC WriteBinlog vs a bare echo server, pull rates.

    .venv/bin/python bench/pump.py [--seconds 6] [--rounds 3] [--clients 64] [--procs 4]
                                   [--paced-rate 400] [--pull-pairs 20000] [--skip-actor]
                                   [--only write|pull]

(a) ``pump_storage_write``: ``bench/pump_storage.py``'s ``run()`` (64 writer
    threads, 1 KiB P+C pairs, vs a grouped append+fdatasync loop).
(b) ``pump_grpc_write``: ``--clients`` concurrent WriteBinlog requests (1 KiB
    prewrites and their commits) spread over ``--procs`` client processes, each
    with its own channel and one grpc.aio event loop (a process of blocking
    threads spends more CPU per call than the server does, on the same 2 cores);
    the ceiling is the same clients against a bare gRPC server whose WriteBinlog
    returns an empty response at once (same message size), measured twice: a
    thread-pool ``grpc.server`` and a ``grpc.aio`` server (what the pump runs);
    the faster of the two is the ceiling, both are printed. Pump and echo
    servers run in child processes started once, and the load alternates
    between them for ``--rounds`` rounds so load drift on a shared machine hits
    all alike. ``pump_grpc_p50_ms``/``p99`` are per-request ack latencies of that
    closed loop: with 64 requests always in flight they are bounded below by
    Little's law (64 / throughput), i.e. they measure queueing;
    ``pump_grpc_echo_p50_ms``/``p99`` are the same for the ceiling echo server
    (same 64 clients): the floor Python gRPC itself sets on this machine.
    ``pump_grpc_paced_p50_ms``/``p99`` are the latencies of an open-loop run at
    ``--paced-rate`` binlogs/s (requests start on schedule; latency counted from
    the scheduled start), i.e. the service time of one write: decode, group
    commit, fdatasync, answer; ``pump_grpc_echo_paced_*`` the same against the
    ceiling echo server.
(c) ``pump_pull_grpc``: one PullBinlogs stream reading ``--pull-pairs`` commits
    (1 KiB prewrite values, preloaded) beside the two bare gRPC servers streaming
    as many same-sized entities, pre-built before the stream (a thread-pool
    ``grpc.server`` and a ``grpc.aio`` server; one stream per server per round,
    alternating; means and every round printed; the faster server is the ceiling);
    ``--only pull|write`` runs just that gRPC part (no storage, no actor);
    ``pump_pull_actor``: ``PumpActor.pull`` batches (4 MiB) on a local Ray.

The pump uses the durable ``tidb_binlog.pump.storage.Storage`` (sync-log on)
when it exists, else the in-memory test storage; the RESULT lines say which.
RESULT lines are printed last.
"""

from __future__ import annotations

import argparse
import importlib.util
import multiprocessing as mp
import os
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


def _config(data_dir: str, commit_delay_ms: float | None = None):
    cfg = types.SimpleNamespace(addr="127.0.0.1:0", status_addr="127.0.0.1:0",
                                data_dir=data_dir, node_id="bench-pump", cluster_id=CLUSTER_ID,
                                gen_binlog_interval_s=3600.0, registry=None)
    if commit_delay_ms is not None:        # else StorageOptions' default
        cfg.commit_delay_s = commit_delay_ms / 1000
    return cfg


class _Echo(pump_pb2_grpc.PumpServicer):
    """The ceilings: WriteBinlog acknowledges at once; PullBinlogs streams ``n``
    pre-built entities as big as the pump's (a 1 KiB-value commit), built once
    before any stream so a stream only sends."""

    def __init__(self, n: int = 0):
        c = bl.commit(1, 2)
        c.prewrite_value = b"x" * PAYLOAD_BYTES
        c.prewrite_key = b"k"
        payload = bl.encode(c)
        self.messages = [pump_pb2.PullBinlogResp(entity=pump_pb2.Entity(
            pos=pump_pb2.Pos(offset=i), payload=payload,
            meta=pump_pb2.Meta(startTs=i, commitTs=i))) for i in range(n)]

    def WriteBinlog(self, request, context):
        return pump_pb2.WriteBinlogResp()

    def PullBinlogs(self, request, context):
        yield from self.messages


class _EchoAio(pump_pb2_grpc.PumpServicer):
    """:class:`_Echo` on grpc.aio (the pump's own server flavour)."""

    def __init__(self, n: int = 0):
        self.messages = _Echo(n).messages

    async def WriteBinlog(self, request, context):
        return pump_pb2.WriteBinlogResp()

    async def PullBinlogs(self, request, context):
        for resp in self.messages:
            yield resp


def _serve_aio(addr_q, stop_ev, preload_pairs: int) -> None:
    import asyncio

    from tidb_binlog.pump.grpc_server import new_event_loop

    async def main():
        server = grpc.aio.server()
        pump_pb2_grpc.add_PumpServicer_to_server(_EchoAio(preload_pairs), server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        addr_q.put(f"127.0.0.1:{port}")
        await asyncio.get_running_loop().run_in_executor(None, stop_ev.wait)
        await server.stop(0)

    loop = new_event_loop()          # the pump's own choice: uvloop when importable
    try:
        loop.run_until_complete(main())
    finally:
        loop.close()


def _serve(kind: str, data_dir: str, addr_q, stop_ev, preload_pairs: int = 0,
           commit_delay_ms: float | None = None) -> None:
    if kind == "echo_aio":
        _serve_aio(addr_q, stop_ev, preload_pairs)
        return
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
    proc = open_pump(_config(data_dir, commit_delay_ms), storage=storage)
    _preload(proc.node.storage.write_binlog, preload_pairs)
    addr_q.put(proc.addr)
    stop_ev.wait()
    addr_q.put(_disk_stats(proc.node))
    proc.stop()


def _disk_stats(node) -> str:
    """What the pump's disk did: fdatasync count and mean latency, binlogs per group."""
    if not _durable_storage_available():
        return "memory storage"
    st = node.storage.stats()
    m = node.storage.metrics.write_duration_s.labels("fsync")
    total_s = sum(s.value for s in m.collect()[0].samples if s.name.endswith("_sum"))
    return (f"fsyncs={st['fsyncs']} mean_fsync_ms={total_s / max(1, st['fsyncs']) * 1000:.2f} "
            f"binlogs_per_group={st['writes'] / max(1, st['groups']):.1f}")


def _preload(write, pairs: int, threads: int = 8) -> None:
    """Write ``pairs`` 1 KiB prewrite+commit pairs (start_ts 1000, 1002, ...) from
    ``threads`` threads, so group commit makes the preload quick."""
    value = b"x" * PAYLOAD_BYTES

    def writer(k: int):
        for i in range(k, pairs, threads):
            ts = 1000 + 2 * i
            write(bl.prewrite(ts, value, prewrite_key=b"k"))
            write(bl.commit(ts, ts + 1))

    ts_ = [threading.Thread(target=writer, args=(k,)) for k in range(threads)]
    for t in ts_:
        t.start()
    for t in ts_:
        t.join()


def _start_server(kind: str, data_dir: str, preload_pairs: int = 0,
                  commit_delay_ms: float | None = None):
    ctx = mp.get_context("spawn")
    q, ev = ctx.Queue(), ctx.Event()
    p = ctx.Process(target=_serve, args=(kind, data_dir, q, ev, preload_pairs, commit_delay_ms),
                    daemon=True)
    p.start()
    return p, ev, q.get(timeout=120), q


def _requests(first_ts: int, pairs: bool):
    """WriteBinlogReqs of 1 KiB prewrites (each followed by its commit if ``pairs``)."""
    value = b"x" * PAYLOAD_BYTES
    ts = first_ts
    while True:
        ts += 2
        yield pump_pb2.WriteBinlogReq(clusterID=CLUSTER_ID, payload=bl.encode(
            bl.prewrite(ts, value, prewrite_key=b"k")))
        if pairs:
            yield pump_pb2.WriteBinlogReq(clusterID=CLUSTER_ID,
                                          payload=bl.encode(bl.commit(ts, ts + 1)))


def _client_process(addr: str, clients: int, first_id: int, round_no: int, start_at: float,
                    seconds: float, pairs: bool, paced_rate: float = 0.0):
    """One client process with its own channel (grpc.aio: one event loop, no threads).

    Closed loop (``paced_rate`` 0): ``clients`` coroutines each send a request as soon
    as the previous one is acknowledged. Paced: requests start on a fixed schedule of
    ``paced_rate`` per second whatever the answers, and each latency is measured
    from its scheduled start (so a stall is not hidden by fewer requests).
    Returns (acknowledged requests, latencies in s). Client ``c`` of round ``r`` uses
    start_ts ``(r + 1) << 44 | (c + 1) << 32 | 2k``: unique in a pump across rounds.
    """
    import asyncio

    base = (round_no + 1) << 44

    async def run():
        lat: list[float] = []
        async with grpc.aio.insecure_channel(addr) as channel:
            await asyncio.wait_for(channel.channel_ready(), 60)
            stub = pump_pb2_grpc.PumpStub(channel)
            await asyncio.sleep(max(0.0, start_at - time.time()))
            t0 = time.perf_counter()
            end = t0 + seconds

            async def send(req, since: float):
                errmsg = (await stub.WriteBinlog(req, timeout=30)).errmsg
                lat.append(time.perf_counter() - since)
                if errmsg:
                    raise RuntimeError(errmsg)

            if paced_rate <= 0:
                async def closed(i: int):
                    for req in _requests(base + ((first_id + i + 1) << 32), pairs):
                        if time.perf_counter() >= end:
                            return
                        await send(req, time.perf_counter())

                await asyncio.gather(*[closed(i) for i in range(clients)])
            else:
                reqs, tasks, k = _requests(base + ((first_id + 1) << 32), pairs), [], 0
                while (due := t0 + k / paced_rate) < end:
                    await asyncio.sleep(max(0.0, due - time.perf_counter()))
                    tasks.append(asyncio.ensure_future(send(next(reqs), due)))
                    k += 1
                await asyncio.gather(*tasks)
        return lat

    lat = asyncio.run(run())
    return len(lat), lat


def _write_load(pool, addr: str, clients: int, procs: int, seconds: float, pairs: bool,
                round_no: int, paced_rate: float = 0.0):
    """``clients`` concurrent writers (or ``paced_rate`` requests/s) spread over the
    ``procs`` processes of ``pool``; (acknowledged binlogs, sorted latencies)."""
    start_at = time.time() + 1.0          # every process is up and connected by then
    per = [clients // procs + (1 if i < clients % procs else 0) for i in range(procs)]
    outs = pool.starmap(_client_process, [
        (addr, per[i], sum(per[:i]) if paced_rate <= 0 else i, round_no, start_at, seconds,
         pairs, paced_rate / procs) for i in range(procs)])
    return sum(o[0] for o in outs), sorted(x for o in outs for x in o[1])


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

                def write(m):
                    errmsg = stub.WriteBinlog(pump_pb2.WriteBinlogReq(
                        clusterID=CLUSTER_ID, payload=bl.encode(m))).errmsg
                    if errmsg:
                        raise RuntimeError(errmsg)

                _preload(write, n_pairs)
            n, since, t0 = 0, 0, time.perf_counter()
            while n < n_pairs:
                batch, since = ray.get(actor.pull.remote(since, 4 << 20, 0.5))
                n += len(batch)
            elapsed = time.perf_counter() - t0
            ray.kill(actor)
            return n, elapsed
    finally:
        ray.shutdown()


def _commit_delay_ms(args) -> float:
    if args.commit_delay_ms is not None:
        return args.commit_delay_ms
    from tidb_binlog.pump.storage import StorageOptions

    return StorageOptions().commit_delay_s * 1000


def _event_loop_kind() -> str:
    """Which event loop the pump and the aio echo run (uvloop or asyncio)."""
    from tidb_binlog.pump.grpc_server import new_event_loop

    loop = new_event_loop()
    loop.close()
    return "uvloop" if type(loop).__module__.startswith("uvloop") else "asyncio"


def _write_report(args, storage_kind, load, rate, echo_rates, best, lat, echo_lat, paced,
                  echo_paced, disk, acks) -> list[str]:
    """Print the write part's detail lines; return its RESULT lines."""
    for v in (lat, paced, echo_paced, *echo_lat.values()):
        v.sort()
    echo_rate, elat = echo_rates[best], echo_lat[best]
    print(f"gRPC write: {args.clients} concurrent requests (grpc.aio) in {args.procs} client "
          f"processes, {args.rounds} alternating rounds, {args.seconds:.1f} s each side, "
          f"event loop {args.event_loop}, load_avg_1m={load:.1f}")
    for k, r in echo_rates.items():
        print(f"gRPC echo {k:8s}: {r:.0f}/s closed loop p50 {_pct(echo_lat[k], 0.5) * 1000:.1f} "
              f"ms p99 {_pct(echo_lat[k], 0.99) * 1000:.1f} ms"
              f"{'  <- write ceiling' if k == best else ''}")
    print(f"gRPC write closed loop: {acks} acks, Little's law bound on latency: "
          f"{args.clients} in flight / {rate:.0f} per s = {args.clients / rate * 1000:.1f} ms "
          f"(echo: {args.clients / echo_rate * 1000:.1f} ms)")
    print(f"gRPC write, pump disk (all write runs, paced included): {disk}")
    return [
        f"RESULT pump_grpc_write value={rate:.0f} unit=binlogs/s ceiling={echo_rate:.0f} "
        f"ratio={rate / echo_rate:.2f} storage={storage_kind} "
        f"clients={args.clients}_in_{args.procs}_processes ceiling_server={best} "
        f"loop={args.event_loop} commit_delay_ms={_commit_delay_ms(args)}",
        f"RESULT pump_grpc_p50_ms value={_pct(lat, 0.5) * 1000:.2f} unit=ms "
        f"echo={_pct(elat, 0.5) * 1000:.2f}",
        f"RESULT pump_grpc_p99_ms value={_pct(lat, 0.99) * 1000:.2f} unit=ms "
        f"echo={_pct(elat, 0.99) * 1000:.2f} clients={args.clients}_closed_loop",
        f"RESULT pump_grpc_echo_p50_ms value={_pct(elat, 0.5) * 1000:.2f} unit=ms "
        f"server={best} clients={args.clients}_closed_loop",
        f"RESULT pump_grpc_echo_p99_ms value={_pct(elat, 0.99) * 1000:.2f} unit=ms "
        f"server={best} clients={args.clients}_closed_loop",
        f"RESULT pump_grpc_paced_p50_ms value={_pct(paced, 0.5) * 1000:.2f} unit=ms "
        f"rate={args.paced_rate:.0f}/s echo={_pct(echo_paced, 0.5) * 1000:.2f}",
        f"RESULT pump_grpc_paced_p99_ms value={_pct(paced, 0.99) * 1000:.2f} unit=ms "
        f"rate={args.paced_rate:.0f}/s echo={_pct(echo_paced, 0.99) * 1000:.2f}",
    ]


def _pull_report(args, load, pulls, streams) -> list[str]:
    """Print the pull part's detail lines (every round of every server); RESULT lines."""
    pull_rate = sum(pulls) / len(pulls)
    stream_rates = {k: sum(v) / len(v) for k, v in streams.items()}
    best = max(stream_rates, key=stream_rates.get)
    print(f"gRPC pull: one stream of {args.pull_pairs} commits per server per round, "
          f"{args.rounds} alternating rounds, event loop {args.event_loop}, load_avg_1m={load:.1f}")
    print(f"gRPC pull pump     : mean {pull_rate:.0f}/s rounds {[round(x) for x in pulls]}")
    for k, v in streams.items():
        print(f"gRPC pull {k:9s}: mean {stream_rates[k]:.0f}/s rounds {[round(x) for x in v]}"
              f"{'  <- pull ceiling' if k == best else ''}")
    return [f"RESULT pump_pull_grpc value={pull_rate:.0f} unit=binlogs/s "
            f"ceiling={stream_rates[best]:.0f} ratio={pull_rate / stream_rates[best]:.2f} "
            f"n={args.pull_pairs} ceiling_server={best} loop={args.event_loop} "
            f"spread={min(pulls):.0f}-{max(pulls):.0f}"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=6.0,
                    help="write load per side (ceiling, pump), split over --rounds")
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--procs", type=int, default=4, help="client processes (the GIL caps one)")
    ap.add_argument("--rounds", type=int, default=3, help="alternating ceiling/pump rounds")
    ap.add_argument("--paced-rate", type=float, default=400.0,
                    help="binlogs/s offered in the paced (open-loop) latency run")
    ap.add_argument("--pull-pairs", type=int, default=20_000)
    ap.add_argument("--actor-pairs", type=int, default=5_000)
    ap.add_argument("--skip-actor", action="store_true")
    ap.add_argument("--commit-delay-ms", type=float, default=None,
                    help="the write pump's StorageOptions.commit_delay_s in ms (default: "
                         "the storage's default; 0 = no commit delay)")
    ap.add_argument("--only", choices=("write", "pull"),
                    help="only the gRPC write part (no storage, no pull, no actor) or only "
                         "the gRPC pull part (no storage, no write, no actor)")
    args = ap.parse_args(argv)
    do_write, do_pull = args.only != "pull", args.only != "write"
    args.event_loop = _event_loop_kind()
    results = []
    storage_kind = "durable" if _durable_storage_available() else "memory"

    storage_bench = ROOT / "bench" / "pump_storage.py"
    if args.only:
        pass
    elif storage_bench.exists():
        spec = importlib.util.spec_from_file_location("pump_storage_bench", storage_bench)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        for line in mod.run(seconds=args.seconds):
            (results.append if str(line).startswith("RESULT") else print)(line)
    else:
        print("bench/pump_storage.py not present: pump_storage_write not measured")

    ctx = mp.get_context("spawn")
    echo_kinds = ("echo", "echo_aio")
    echo_n = {k: 0 for k in echo_kinds}
    echo_lat: dict[str, list[float]] = {k: [] for k in echo_kinds}
    streams: dict[str, list[float]] = {k: [] for k in echo_kinds}
    pump_n = 0
    pump_s = 0.0
    lat: list[float] = []
    pulls: list[float] = []
    paced: list[float] = []
    echo_paced: list[float] = []
    disk = ""
    best = echo_kinds[0]
    with tempfile.TemporaryDirectory() as d, ctx.Pool(args.procs if do_write else 1) as pool:
        echoes = {k: _start_server(k, d, args.pull_pairs if do_pull else 0) for k in echo_kinds}
        servers = list(echoes.values())
        if do_write:
            pump_srv = _start_server("pump", str(Path(d) / "w"),
                                     commit_delay_ms=args.commit_delay_ms)
            servers.append(pump_srv)
            pump_addr, pump_q = pump_srv[2], pump_srv[3]
            print(f"pump (write) pid {pump_srv[0].pid} at {pump_addr}", flush=True)
        if do_pull:
            pull_srv = _start_server("pump", str(Path(d) / "r"), args.pull_pairs)
            servers.append(pull_srv)
            pull_addr = pull_srv[2]
            print(f"pump (pull) pid {pull_srv[0].pid} at {pull_addr}", flush=True)
        per_round_s = args.seconds / args.rounds
        # Rounds alternate ceilings and pump so load drift on a shared machine hits all.
        for r in range(args.rounds):
            if do_write:
                for k, (_, _, addr, _) in echoes.items():
                    n, lat_r = _write_load(pool, addr, args.clients, args.procs, per_round_s,
                                           pairs=False, round_no=r)
                    echo_n[k] += n
                    echo_lat[k] += lat_r
                n, lat_r = _write_load(pool, pump_addr, args.clients, args.procs, per_round_s,
                                       pairs=True, round_no=r)
                pump_n, pump_s = pump_n + n, pump_s + per_round_s
                lat += lat_r
            if do_pull:
                pulls.append(_pull_grpc(pull_addr, args.pull_pairs))
                for k, (_, _, addr, _) in echoes.items():
                    streams[k].append(_pull_grpc(addr, args.pull_pairs))
        if do_write:
            best = max(echo_kinds, key=lambda k: echo_n[k])
            _, paced = _write_load(pool, pump_addr, args.clients, args.procs, per_round_s,
                                   pairs=True, round_no=args.rounds, paced_rate=args.paced_rate)
            _, echo_paced = _write_load(pool, echoes[best][2], args.clients, args.procs,
                                        per_round_s, pairs=False, round_no=args.rounds,
                                        paced_rate=args.paced_rate)
        for _, stop, _, _ in servers:
            stop.set()
        if do_write:
            disk = pump_q.get(timeout=60)
        for proc, _, _, _ in servers:
            proc.join(30)
    load = os.getloadavg()[0]
    if do_write:
        results += _write_report(args, storage_kind, load, pump_n / pump_s,
                                 {k: echo_n[k] / pump_s for k in echo_kinds}, best, lat,
                                 echo_lat, paced, echo_paced, disk, len(lat))
    if do_pull:
        results += _pull_report(args, load, pulls, streams)
    if not args.skip_actor and not args.only:
        n_act, t_act = _actor_pull(args.actor_pairs)
        results.append(f"RESULT pump_pull_actor value={n_act / t_act:.0f} unit=binlogs/s "
                       f"n={n_act}")
    for line in results:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
