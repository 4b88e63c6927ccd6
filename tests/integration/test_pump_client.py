"""PumpClient against real gRPC servers on 127.0.0.1: failover, probing, commit routing.

The pumps here are minimal ``binlog.Pump`` servicers that store what they receive
(the real pump server is tested on its own); they check the cluster id and
acknowledge the probe without storing it, like the real one.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest
from prometheus_client import REGISTRY

from tidb_binlog.binlog import BinlogType, commit, decode, encode, is_probe, prewrite, rollback
from tidb_binlog.errors import ClusterIDMismatch, ProtocolError, UnavailableError
from tidb_binlog.node import ONLINE, PAUSED, PUMP, NodeStatus
from tidb_binlog.proto import pump_pb2, pump_pb2_grpc
from tidb_binlog.pump_client import HASH, LOCAL, LOCAL_PUMP_ID, PumpChannel, PumpClient, batch
from tidb_binlog.testing.registry import InMemoryRegistry

pytestmark = pytest.mark.integration


class StoringPump(pump_pb2_grpc.PumpServicer):
    """A pump that stores every binlog it acknowledges; stoppable and restartable on its port."""

    def __init__(self, node_id: str, cluster_id: int, bind: str = "127.0.0.1:0"):
        self.node_id = node_id
        self.cluster_id = cluster_id
        self.binlogs = []
        self.probes = 0
        self._lock = threading.Lock()
        self._server = None
        self.addr = self._start(bind)

    def _start(self, bind: str) -> str:
        server = grpc.server(ThreadPoolExecutor(max_workers=4))
        pump_pb2_grpc.add_PumpServicer_to_server(self, server)
        port = server.add_insecure_port(bind)
        server.start()
        self._server = server
        return bind if bind.startswith("unix:") else f"127.0.0.1:{port}"

    def stop(self) -> None:
        self._server.stop(0).wait()

    def restart(self) -> None:
        self._start(self.addr)

    def WriteBinlog(self, request, context):
        if request.clusterID != self.cluster_id:
            return pump_pb2.WriteBinlogResp(
                errmsg=f"cluster ID are mismatch, {request.clusterID} vs {self.cluster_id}")
        b = decode(request.payload)
        with self._lock:
            if is_probe(b):
                self.probes += 1
            else:
                self.binlogs.append(b)
        return pump_pb2.WriteBinlogResp(errmsg="")

    def PullBinlogs(self, request, context):
        context.abort(grpc.StatusCode.UNIMPLEMENTED, "not a real pump")

    def start_ts_of(self, tp) -> set[int]:
        with self._lock:
            return {b.start_ts for b in self.binlogs if b.tp == tp}


@pytest.fixture
def cluster():
    registry = InMemoryRegistry()
    cid = registry.cluster_id()
    pumps = {f"pump-{i}": StoringPump(f"pump-{i}", cid) for i in (1, 2, 3)}
    for p in pumps.values():
        registry.update_node(PUMP, NodeStatus(p.node_id, p.addr))
    yield registry, pumps
    for p in pumps.values():
        p.stop()


def client_for(registry, **kw) -> PumpClient:
    kw.setdefault("probe_interval_s", 3600)  # tests call probe_now() unless they test the thread
    kw.setdefault("write_timeout_s", 5)
    kw.setdefault("unavailable_after_errors", 2)
    return PumpClient(registry, **kw)


def wait_until(predicate, what: str, budget_s: float = 30.0):
    deadline = time.monotonic() + budget_s
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"gave up waiting for {what}")
        time.sleep(0.02)


_ts = iter(range(1000, 10**9, 10))


def txn(client: PumpClient) -> tuple[int, str]:
    start_ts = next(_ts)
    node = client.write_binlog(prewrite(start_ts, b"pv", prewrite_key=b"k"))
    assert client.write_binlog(commit(start_ts, start_ts + 1)) == node
    return start_ts, node


def assert_commits_follow_prewrites(pumps):
    for p in pumps.values():
        assert p.start_ts_of(BinlogType.COMMIT) <= p.start_ts_of(BinlogType.PREWRITE), p.node_id


def test_failover_when_one_of_three_dies_then_probe_brings_it_back(cluster):
    registry, pumps = cluster
    with client_for(registry) as client:
        placed = [txn(client) for _ in range(6)]
        assert {node for _, node in placed} == set(pumps)  # range spreads over all three

        pumps["pump-2"].stop()
        placed = [txn(client) for _ in range(9)]
        assert "pump-2" not in {node for _, node in placed}
        assert client.unavailable_pumps() == ["pump-2"]
        assert client.probe_now() == []  # still down

        pumps["pump-2"].restart()
        assert client.probe_now() == ["pump-2"]
        assert pumps["pump-2"].probes >= 1
        placed = [txn(client) for _ in range(6)]
        assert "pump-2" in {node for _, node in placed}
    assert_commits_follow_prewrites(pumps)
    for start_ts, node in placed:
        assert start_ts in pumps[node].start_ts_of(BinlogType.COMMIT)


def test_the_probe_thread_brings_a_pump_back(cluster):
    registry, pumps = cluster
    with client_for(registry, probe_interval_s=0.05, unavailable_after_errors=1) as client:
        pumps["pump-1"].stop()
        for _ in range(3):
            txn(client)
        wait_until(lambda: "pump-1" in client.unavailable_pumps(), "pump-1 unavailable")
        pumps["pump-1"].restart()
        wait_until(lambda: client.unavailable_pumps() == [], "the prober to bring pump-1 back")


def test_commit_is_retried_on_the_same_pump_while_it_restarts(cluster):
    registry, pumps = cluster
    with client_for(registry, strategy=HASH) as client:
        start_ts = 3 * 1000 + 1  # hash: (start_ts mod 3) == 1 -> pump-2
        assert client.write_binlog(prewrite(start_ts, b"pv")) == "pump-2"
        pumps["pump-2"].stop()
        pending = client.write_binlog_async(commit(start_ts, start_ts + 5))
        txn(client)  # other traffic fails over meanwhile
        pumps["pump-2"].restart()
        assert pending.result(timeout=60) == "pump-2"
    assert start_ts in pumps["pump-2"].start_ts_of(BinlogType.COMMIT)
    for other in ("pump-1", "pump-3"):
        assert start_ts not in pumps[other].start_ts_of(BinlogType.COMMIT)


def test_prewrite_raises_naming_every_pump_when_all_are_down(cluster):
    registry, pumps = cluster
    for p in pumps.values():
        p.stop()
    with client_for(registry, write_timeout_s=0.3) as client:
        with pytest.raises(UnavailableError, match="start_ts=77") as info:
            client.write_binlog(prewrite(77, b"pv"))
    for node in pumps:
        assert node in str(info.value)
    for p in pumps.values():
        p.restart()


def _given_up(reason: str) -> float:
    return REGISTRY.get_sample_value("binlog_pump_client_commit_given_up_total",
                                     {"reason": reason}) or 0.0


def test_commit_given_up_after_the_budget_is_counted_and_never_raised(cluster):
    registry, pumps = cluster
    with client_for(registry, strategy=HASH, commit_retry_s=0.3) as client:
        client.write_binlog(prewrite(3 * 500, b"pv"))  # -> pump-1
        pumps["pump-1"].stop()
        before = _given_up("timeout")
        assert client.write_binlog(rollback(3 * 500)) is None
        assert _given_up("timeout") == before + 1
        assert client.pump_of(3 * 500) is None
        before = _given_up("no_prewrite")
        assert client.write_binlog(commit(424242, 424243)) is None
        assert _given_up("no_prewrite") == before + 1
    pumps["pump-1"].restart()


def test_watcher_follows_registry_changes(cluster):
    registry, pumps = cluster
    with client_for(registry, watch_timeout_s=30) as client:
        assert client.available_pumps() == ["pump-1", "pump-2", "pump-3"]
        registry.update_node(PUMP, NodeStatus("pump-3", pumps["pump-3"].addr, state=PAUSED))
        wait_until(lambda: client.available_pumps() == ["pump-1", "pump-2"], "pump-3 paused")
        assert all(txn(client)[1] != "pump-3" for _ in range(4))
        extra = StoringPump("pump-4", registry.cluster_id())
        try:
            registry.update_node(PUMP, NodeStatus("pump-4", extra.addr, state=ONLINE))
            wait_until(lambda: "pump-4" in client.available_pumps(), "pump-4 to appear")
            assert "pump-4" in {txn(client)[1] for _ in range(3)}
        finally:
            extra.stop()


def test_batched_path_pipelines_and_fails_over(cluster):
    registry, pumps = cluster
    with client_for(registry) as client:
        pumps["pump-3"].stop()
        starts = [next(_ts) for _ in range(30)]
        results = client.write_binlogs([prewrite(ts, b"pv") for ts in starts])
        assert all(r.error is None and r.node_id in {"pump-1", "pump-2"} for r in results)
        # a commit in the same batch as its prewrite follows it to the same pump
        more = next(_ts)
        batch = [commit(ts, ts + 1) for ts in starts] + [prewrite(more, b"pv"), commit(more, more + 1)]
        results2 = client.write_binlogs(batch)
        assert [r.node_id for r in results2[:30]] == [r.node_id for r in results]
        assert results2[31].node_id == results2[30].node_id
    assert_commits_follow_prewrites(pumps)
    pumps["pump-3"].restart()


def _written_ok(kind: str) -> float:
    return REGISTRY.get_sample_value("binlog_pump_client_write_total",
                                     {"type": kind, "result": "ok"}) or 0.0


@pytest.mark.parametrize("size", [1, 3, 12])  # below and above batch.PIPELINE_MIN_BINLOGS
def test_batched_path_sequential_and_pipelined_sends_agree(cluster, size):
    assert 3 < batch.PIPELINE_MIN_BINLOGS <= 12
    registry, pumps = cluster
    with client_for(registry) as client:
        pumps["pump-3"].stop()
        starts = [next(_ts) for _ in range(size)]
        ok_before = _written_ok("prewrite"), _written_ok("commit")
        taken = client.write_binlogs([prewrite(ts, b"pv") for ts in starts])
        assert all(r.error is None and r.node_id in {"pump-1", "pump-2"} for r in taken)
        assert [client.pump_of(ts) for ts in starts] == [r.node_id for r in taken]
        done = client.write_binlogs([commit(ts, ts + 1) for ts in starts]
                                    + [commit(7, 8)])  # no prewrite went through this client
        assert [r.node_id for r in done[:-1]] == [r.node_id for r in taken]
        assert done[-1].node_id is None and done[-1].pending.result(timeout=30) is None
        assert [client.pump_of(ts) for ts in starts] == [None] * size
        assert (_written_ok("prewrite"), _written_ok("commit")) == \
            (ok_before[0] + size, ok_before[1] + size)
    assert_commits_follow_prewrites(pumps)
    pumps["pump-3"].restart()


def test_a_channel_closed_under_a_call_fails_as_unavailable(cluster):
    registry, pumps = cluster
    channel = PumpChannel("pump-1", pumps["pump-1"].addr)
    payload = encode(prewrite(next(_ts), b"pv"))
    assert channel.write(registry.cluster_id(), payload, 5.0) == ""
    stale = channel._call  # what a thread racing with reset() still holds
    channel.reset()
    channel._call = stale
    with pytest.raises(UnavailableError, match="channel was reset during the call"):
        channel.write(registry.cluster_id(), payload, 5.0)
    channel.reset()
    assert channel.write(registry.cluster_id(), payload, 5.0) == ""
    channel.close()


def test_cluster_id_mismatch_and_oversize_raise_at_once(cluster):
    registry, _ = cluster
    with client_for(registry, cluster_id=registry.cluster_id() ^ 1) as client:
        with pytest.raises(ClusterIDMismatch, match="belongs to another cluster"):
            client.write_binlog(prewrite(5, b"pv"))
    with client_for(registry, max_message_size_bytes=1000) as client:
        with pytest.raises(ProtocolError, match="above max_message_size_bytes=1000"):
            client.write_binlog(prewrite(5, b"x" * 2000))


def test_local_unix_socket_and_static_list(tmp_path):
    local = StoringPump(LOCAL_PUMP_ID, 9, bind=f"unix:{tmp_path}/pump.sock")
    tcp = StoringPump("static", 9)
    try:
        with PumpClient(None, cluster_id=9, strategy=LOCAL,
                        local_socket=str(tmp_path / "pump.sock")) as client:
            assert txn(client)[1] == LOCAL_PUMP_ID
        with PumpClient(None, cluster_id=9, pumps=[tcp.addr]) as client:
            assert txn(client)[1] == tcp.addr
        assert len(local.binlogs) == 2 and len(tcp.binlogs) == 2
        assert encode(local.binlogs[0]) == encode(prewrite(local.binlogs[0].start_ts, b"pv",
                                                           prewrite_key=b"k"))
    finally:
        local.stop()
        tcp.stop()


# -- the real pump server (PumpNode + in-memory storage behind tidb_binlog.pump.server) --


@pytest.fixture
def real_cluster(tmp_path):
    server = pytest.importorskip("tidb_binlog.pump.server")
    from tidb_binlog.pump.node import PumpNode, PumpNodeOptions
    from tidb_binlog.testing.memory_storage import MemoryStorage

    registry = InMemoryRegistry()
    procs = {}
    for i in (1, 2, 3):
        options = PumpNodeOptions(data_dir=str(tmp_path / f"pump{i}"), node_id=f"pump-{i}",
                                  advertise_addr="127.0.0.1:0", gen_binlog_interval_s=3600.0)
        node = PumpNode(options, MemoryStorage(), registry=registry, notifier=lambda addr: None)
        procs[f"pump-{i}"] = server.serve_pump(node, "127.0.0.1:0", http=False)
    yield registry, procs, server
    for proc in procs.values():
        proc.stop()


def committed_start_ts(proc) -> set[int]:
    return {decode(payload).start_ts
            for _, payload in proc.node.storage.pull_commit_binlogs(0)}


def test_real_pumps_failover_probe_and_commit_follows_prewrite(real_cluster):
    registry, procs, server = real_cluster
    assert {n.node_id for n in registry.nodes(PUMP)} == set(procs)  # the pumps registered
    placed = {}
    with client_for(registry) as client:
        for _ in range(6):
            start_ts, node = txn_with_tso(client, registry)
            placed[start_ts] = node
        # pump-2's gRPC endpoint dies while its record still says online
        dead = procs["pump-2"]
        dead.grpc_server.stop(0)
        for _ in range(9):
            start_ts, node = txn_with_tso(client, registry)
            assert node != "pump-2"
            placed[start_ts] = node
        assert client.unavailable_pumps() == ["pump-2"]
        dead.grpc_server = server.build_server(dead.node, dead.addr)
        assert client.probe_now() == ["pump-2"]
        for _ in range(6):
            start_ts, node = txn_with_tso(client, registry)
            placed[start_ts] = node
    assert "pump-2" in list(placed.values())[-6:]
    for node, proc in procs.items():
        assert committed_start_ts(proc) == {ts for ts, n in placed.items() if n == node}


def txn_with_tso(client: PumpClient, registry) -> tuple[int, str]:
    start_ts = registry.get_ts()
    node = client.write_binlog(prewrite(start_ts, encode_pv(), prewrite_key=b"k"))
    assert client.write_binlog(commit(start_ts, registry.get_ts())) == node
    return start_ts, node


def encode_pv() -> bytes:
    from tidb_binlog.binlog import new_prewrite_value

    return encode(new_prewrite_value(1))


# -- write_finish_nowait: a Commit/Rollback started on the caller's thread (same rules as
# write_binlog: the prewrite's pump, retried only there, given up when closed; never raised)

def test_commits_go_to_the_prewrites_pump_and_resolve_with_its_node(cluster):
    registry, pumps = cluster
    with client_for(registry) as client:
        starts = list(range(9000, 9000 + 30 * 7, 7))
        nodes = [client.write_binlog(prewrite(ts, b"pv")) for ts in starts]
        ok_before = _written_ok("commit")
        futures = [client.write_finish_nowait(commit(ts, ts + 1)) for ts in starts]
        results = [f.result(timeout=30) for f in futures]
        assert [r.node_id for r in results] == nodes
        assert all(r.error is None and r.pending is None for r in results)
        assert [client.pump_of(ts) for ts in starts] == [None] * len(starts)
        assert _written_ok("commit") == ok_before + len(starts)
    for node, p in pumps.items():
        mine = {ts for ts, n in zip(starts, nodes, strict=True) if n == node}
        assert p.start_ts_of(BinlogType.COMMIT) & set(starts) == mine


def test_a_failed_first_attempt_is_retried_on_the_same_pump(cluster):
    registry, pumps = cluster
    with client_for(registry, strategy=HASH) as client:
        start_ts = 3 * 2000 + 1  # hash: (start_ts mod 3) == 1 -> pump-2
        assert client.write_binlog(prewrite(start_ts, b"pv")) == "pump-2"
        pumps["pump-2"].stop()
        result = client.write_finish_nowait(commit(start_ts, start_ts + 5)).result(timeout=30)
        assert result.node_id is None and result.pending is not None
        pumps["pump-2"].restart()
        assert result.pending.result(timeout=60) == "pump-2"
    assert start_ts in pumps["pump-2"].start_ts_of(BinlogType.COMMIT)
    for other in ("pump-1", "pump-3"):
        assert start_ts not in pumps[other].start_ts_of(BinlogType.COMMIT)


def test_no_prewrite_and_a_closed_client_give_up_without_raising(cluster):
    registry, pumps = cluster
    client = client_for(registry, strategy=HASH)
    before = _given_up("no_prewrite")
    result = client.write_finish_nowait(commit(525252, 525253)).result(timeout=30)
    assert result.pending.result(timeout=30) is None
    assert _given_up("no_prewrite") == before + 1
    client.write_binlog(prewrite(3 * 700, b"pv"))  # -> pump-1
    pumps["pump-1"].stop()
    try:
        fut = client.write_finish_nowait(rollback(3 * 700))
        client.close(timeout_s=0.2)
        result = fut.result(timeout=30)
        assert result.node_id is None and result.pending is not None
        assert result.pending.result(timeout=30) is None  # given up: never raised
    finally:
        pumps["pump-1"].restart()


class SlowPump(StoringPump):
    """A pump that takes ``delay_s`` to acknowledge a Prewrite (a big payload being
    received and fsynced)."""

    delay_s = 0.4

    def WriteBinlog(self, request, context):
        if decode(request.payload).tp == BinlogType.PREWRITE:
            time.sleep(self.delay_s)
        return super().WriteBinlog(request, context)


def test_a_prewrite_deadline_scales_with_its_payload():
    """Base deadlines far below the pump's answer time; the payload's share at the
    throughput floor (64 KB at 20 KB/s: +3.2 s) lets the attempt finish, once."""
    pump = SlowPump("slow", 9)
    payload = b"x" * (64 << 10)
    try:
        with PumpClient(None, cluster_id=9, pumps=[pump.addr], rpc_timeout_s=0.05,
                        write_timeout_s=0.1, min_write_bytes_per_s=20_000,
                        probe_interval_s=3600) as client:
            assert client.rpc_timeout_for(len(payload)) == pytest.approx(0.05 + 65536 / 20_000)
            assert client.write_binlog(prewrite(7, payload)) == pump.addr
        assert [b.start_ts for b in pump.binlogs] == [7]
        # the same write with the deadline not scaled (a floor so high it adds nothing) is
        # cut off at 0.05 s, and the 0.1 s budget runs out: what a 2M-row Prewrite hit
        with PumpClient(None, cluster_id=9, pumps=[pump.addr], rpc_timeout_s=0.05,
                        write_timeout_s=0.1, min_write_bytes_per_s=1e15,
                        probe_interval_s=3600) as client:
            with pytest.raises(UnavailableError, match=r"\(65\d+ bytes\) within 0.1s"):
                client.write_binlog(prewrite(8, payload))
    finally:
        pump.stop()


def test_min_write_bytes_per_s_must_be_positive():
    with pytest.raises(ValueError, match="min_write_bytes_per_s must be positive"):
        PumpClient(None, cluster_id=9, pumps=["127.0.0.1:1"], min_write_bytes_per_s=0)


@pytest.mark.parametrize("size", [300, (1 << 20) + 7])
def test_a_prewrite_given_as_parts_is_sent_as_the_same_binlog(size):
    """``write_prewrite_parts``: what the upstream hands over for a large transaction;
    the list is emptied (the caller's last reference to the payload goes)."""
    pump = StoringPump("parts", 9)
    value = bytes(range(256)) * (size // 256 + 1)
    payload = encode(prewrite(11, value, prewrite_key=b"k"))
    try:
        with PumpClient(None, cluster_id=9, pumps=[pump.addr], probe_interval_s=3600) as client:
            parts = [payload[:100], payload[100:]]
            assert client.write_prewrite_parts(11, parts) == pump.addr
            assert parts == []
            assert client.pump_of(11) == pump.addr  # the commit follows it
            client.write_binlog(commit(11, 12))
        assert [encode(b) for b in pump.binlogs] == [payload, encode(commit(11, 12))]
        with PumpClient(None, cluster_id=9, pumps=[pump.addr], probe_interval_s=3600,
                        max_message_size_bytes=size // 2) as client:
            with pytest.raises(ProtocolError, match="above max_message_size_bytes"):
                client.write_prewrite_parts(13, [payload])
    finally:
        pump.stop()


@pytest.mark.parametrize("size", [300, (1 << 20) + 7])
def test_a_prewrite_written_by_the_caller_into_the_request_is_the_same_binlog(size):
    """``write_prewrite_from``: the upstream writes its Prewrite into the request."""
    pump = StoringPump("from", 9)
    payload = encode(prewrite(21, bytes(range(256)) * (size // 256 + 1), prewrite_key=b"k"))
    try:
        with PumpClient(None, cluster_id=9, pumps=[pump.addr], probe_interval_s=3600) as client:
            assert client.write_prewrite_from(21, len(payload),
                                              lambda out: out.write(payload)) == pump.addr
            with pytest.raises(ValueError, match="fill wrote 3 bytes, not the 9 announced"):
                client.write_prewrite_from(22, 9, lambda out: out.write(b"abc"))
        assert [encode(b) for b in pump.binlogs] == [payload]
    finally:
        pump.stop()
