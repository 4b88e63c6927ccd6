"""The ``PumpStorage`` contract (tidb_binlog/pump/storage/protocol.py), run over both
implementations: the durable ``Storage`` in tmp_path and the in-memory ``MemoryStorage``.

Whatever the protocol promises, each keeps: pairing and commit_ts order, pull positions,
orphans, GC, ``wait_for_commit``, the async and file writes, references and range reads,
the disk guard, stats and close. And the shape: both have every protocol member with a
compatible signature, neither grows a public member the other lacks unless it is listed
below as its own, and the pump process calls nothing on a storage outside the protocol
(nor probes one with ``getattr``/``hasattr``).
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import threading
from pathlib import Path

import pytest

from tidb_binlog import binlog as bl
from tidb_binlog.binlog_ref import BinlogRef
from tidb_binlog.errors import DiskSpaceError, ProtocolError, PurgedError, StorageError
from tidb_binlog.pump.storage import PumpStorage, Storage, StorageMetrics, StorageOptions
from tidb_binlog.pump.stream_write import SpillFile
from tidb_binlog.pump.wire import binlog_header
from tidb_binlog.testing.memory_storage import MemoryStorage

ROOT = Path(__file__).resolve().parents[2]

# The modules of the pump process that hold a storage (PumpNode.storage and its users).
CALLERS = ("tidb_binlog/pump/node.py", "tidb_binlog/pump/grpc_server.py",
           "tidb_binlog/pump/http_status.py", "tidb_binlog/pump/metrics.py",
           "tidb_binlog/pump/server.py", "actors/pump.py")

# Public members outside the protocol, each implementation's own. A member added to one
# implementation only fails test_no_public_member_outside_the_protocol_but_its_own until
# it joins the protocol (and the other implementation) or this list, with its reason.
OWN_MEMBERS = {
    Storage: {
        "options", "metrics", "disk_guard", "vlog", "index",  # its parts (tools, tests)
        "resolve_pending",                  # one missing-commit round (a thread runs them)
        "pause_indexing", "resume_indexing",  # test knobs: stall the indexer
    },
    MemoryStorage: {
        "free_bytes", "stop_write_at_available_space_bytes",  # the fake disk guard's knobs
        "writes",                                              # counted writes (node tests)
    },
}


def protocol_members() -> set[str]:
    return {name for name in vars(PumpStorage) if not name.startswith("_")}


@pytest.fixture(params=[Storage, MemoryStorage], ids=["storage", "memory"])
def make(request, tmp_path):
    """``make(guard_bytes=0)``: a new storage of the parametrized kind, closed at the end."""
    opened = []

    def make(guard_bytes: int = 0):
        if request.param is Storage:
            options = StorageOptions(stop_write_at_available_space_bytes=guard_bytes,
                                     resolve_interval_s=3600)
            s = Storage(tmp_path / f"data{len(opened)}", options, metrics=StorageMetrics())
        else:
            s = MemoryStorage(stop_write_at_available_space_bytes=guard_bytes)
        opened.append(s)
        return s

    yield make
    for s in opened:
        s.close()


@pytest.fixture
def s(make):
    return make()


def write_pairs(s, *pairs, value=b"v"):
    for start_ts, commit_ts in pairs:
        s.write_binlog(bl.prewrite(start_ts, value + b"%d" % start_ts, prewrite_key=b"k"))
        s.write_binlog(bl.commit(start_ts, commit_ts))


# -- shape -------------------------------------------------------------------------------
def _signature_problems(proto_fn, impl_fn) -> list[str]:
    """How ``impl_fn`` fails to accept every call the protocol's ``proto_fn`` allows."""
    kinds = inspect.Parameter
    want = inspect.signature(proto_fn).parameters
    got = inspect.signature(impl_fn).parameters
    problems = []
    want_pos = [n for n, p in want.items() if p.kind is kinds.POSITIONAL_OR_KEYWORD]
    got_pos = [n for n, p in got.items() if p.kind is kinds.POSITIONAL_OR_KEYWORD]
    if got_pos[:len(want_pos)] != want_pos:
        problems.append(f"positional parameters {got_pos}, the protocol's are {want_pos}")
    for name, p in want.items():
        q = got.get(name)
        if q is None:
            problems.append(f"no parameter {name!r}")
        elif p.default is not p.empty and q.default != p.default:
            problems.append(f"{name!r} defaults to {q.default!r}, the protocol's to "
                            f"{p.default!r}")
    for name, q in got.items():
        if name not in want and q.default is q.empty and \
                q.kind not in (kinds.VAR_POSITIONAL, kinds.VAR_KEYWORD):
            problems.append(f"parameter {name!r} the protocol does not pass has no default")
    return problems


def test_every_protocol_member_is_implemented(s):
    members = protocol_members()
    assert {"write_binlog", "pull_commits", "read_payload", "dir", "stores_payload"} <= members
    problems = []
    for name in sorted(members):
        want = vars(PumpStorage)[name]
        try:
            got = inspect.getattr_static(s, name)
        except AttributeError:
            problems.append(f"{name}: missing")
            continue
        if isinstance(want, property):
            if inspect.isfunction(got):
                problems.append(f"{name}: a method, the protocol has a property")
            continue
        if not inspect.isfunction(got):
            problems.append(f"{name}: not a method ({type(got).__name__})")
            continue
        problems += [f"{name}: {p}" for p in _signature_problems(want, got)]
    assert not problems, f"{type(s).__name__} does not implement PumpStorage: {problems}"


def test_no_public_member_outside_the_protocol_but_its_own(s):
    public = {name for name in dir(s) if not name.startswith("_")}
    own = OWN_MEMBERS[type(s)]
    assert own <= public, f"stale OWN_MEMBERS entries: {own - public}"
    extra = public - protocol_members() - own
    assert not extra, (f"{type(s).__name__} has public members the protocol does not name: "
                       f"{sorted(extra)}; add them to PumpStorage and every implementation, "
                       "or to OWN_MEMBERS with the reason")


def _is_storage(expr: ast.expr) -> bool:
    return (isinstance(expr, ast.Name) and expr.id == "storage") or \
        (isinstance(expr, ast.Attribute) and expr.attr == "storage")


def storage_uses(source: str) -> tuple[set[str], list[int]]:
    """Attributes read on a storage (``storage.x``, ``self.storage.x``, ``node.storage.x``)
    in ``source``, and the lines probing one with getattr/hasattr."""
    used, probes = set(), []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and _is_storage(node.value):
            used.add(node.attr)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                node.func.id in ("getattr", "hasattr") and node.args and \
                _is_storage(node.args[0]):
            probes.append(node.lineno)
    return used, probes


def test_storage_uses_finds_calls_and_probes():
    used, probes = storage_uses("def f(node, storage):\n"
                                "    node.storage.gc(1)\n"
                                "    x = getattr(node.storage, 'dir', None)\n"
                                "    return storage.max_commit_ts\n")
    assert used == {"gc", "max_commit_ts"} and probes == [3]


@pytest.mark.parametrize("path", CALLERS)
def test_the_pump_process_uses_only_the_protocol(path):
    used, probes = storage_uses((ROOT / path).read_text())
    assert not probes, f"{path} probes its storage with getattr/hasattr at lines {probes}"
    outside = used - protocol_members()
    assert not outside, f"{path} uses {sorted(outside)} of its storage, outside PumpStorage"


def test_dir_stores_payload_and_the_start(s):
    assert s.dir is None or (isinstance(s.dir, Path) and s.dir.is_dir())
    assert type(s.stores_payload) is bool
    assert (s.max_commit_ts, s.gc_ts, s.all_matched()) == (0, 0, True)
    assert s.pull_commits(0) == ([], 0)


# -- writing, pairing, pulling ------------------------------------------------------------
def test_pairs_are_served_in_commit_ts_order_filled_with_their_prewrite(s):
    s.write_binlog(bl.prewrite(10, b"v10", prewrite_key=b"k10"))
    s.write_binlog(bl.prewrite(20, b"", ddl_query=b"create table t (a int)", ddl_job_id=3,
                               ddl_schema_state=5))
    s.write_binlog(bl.commit(20, 21, ddl_job_id=3))
    assert s.flush()
    # P(10) arrived before C(21) and is unmatched: nothing is served yet
    assert (s.max_commit_ts, s.all_matched()) == (0, False)
    assert s.pull_commits(0) == ([], 0)
    s.write_binlog(bl.commit(10, 25))
    s.write_binlog(bl.fake(30))
    s.write_binlog(bl.prewrite(40, b"v40"))
    s.write_binlog(bl.rollback(40))
    assert s.flush()
    assert (s.max_commit_ts, s.all_matched()) == (30, True)
    batch, position = s.pull_commits(0)
    assert [ts for ts, _ in batch] == [21, 25, 30] and position == 30
    c21, c25, f30 = (bl.decode(payload) for _, payload in batch)
    assert (c21.tp, c21.start_ts, c21.ddl_query, c21.ddl_job_id, c21.ddl_schema_state) == \
        (bl.BinlogType.COMMIT, 20, b"create table t (a int)", 3, 5)
    assert (c25.start_ts, c25.prewrite_value, c25.prewrite_key) == (10, b"v10", b"k10")
    assert bl.is_fake(f30) and f30.commit_ts == 30
    assert s.pull_commit_binlogs(21) == batch[1:]
    assert s.pull_commits(30) == ([], 30)


def test_a_batch_is_cut_by_count_or_bytes_and_its_position_says_where(s):
    write_pairs(s, *((ts, ts + 1) for ts in range(10, 20, 2)))
    assert s.flush() and s.max_commit_ts == 19
    assert [ts for ts, _ in s.pull_commits(0, max_count=2)[0]] == [11, 13]
    assert s.pull_commits(0, max_count=2)[1] == 13
    batch, position = s.pull_commits(0, max_bytes=1)        # at least one item
    assert [ts for ts, _ in batch] == [11] and position == 11
    got, since = [], 0
    while True:
        batch, since = s.pull_commits(since, max_bytes=60)
        if not batch:
            break
        got += [ts for ts, _ in batch]
    assert got == [11, 13, 15, 17, 19] and since == 19


def test_an_orphan_commit_is_skipped_and_the_position_passes_it(s):
    s.write_binlog(bl.commit(50, 51))      # its Prewrite was never written here
    s.write_binlog(bl.fake(60))
    assert s.flush() and s.max_commit_ts == 60
    batch, position = s.pull_commits(0)
    assert [ts for ts, _ in batch] == [60] and position == 60


def test_get_binlog_by_its_key(s):
    write_pairs(s, (10, 11))
    s.write_binlog(bl.fake(12))
    assert s.flush()
    p, c, f = s.get_binlog(10), s.get_binlog(11), s.get_binlog(12)
    assert (p.tp, p.start_ts, p.prewrite_value) == (bl.BinlogType.PREWRITE, 10, b"v10")
    assert (c.tp, c.start_ts, c.commit_ts) == (bl.BinlogType.COMMIT, 10, 11)
    assert bl.is_fake(f)
    assert s.get_binlog(13) is None


def test_unstorable_binlogs_are_refused_and_nothing_is_stored(s):
    for b in (bl.probe(), bl.commit(10, 10), bl.commit(10, 9),
              bl.new_binlog(bl.BinlogType.PRE_DDL, 5)):
        with pytest.raises(ProtocolError):
            s.write_binlog(b)
    assert s.flush() and s.stats()["writes"] == 0


def test_the_disk_guard_refuses_prewrites_only(make):
    assert make().disk_guard_message() == ""
    s = make(guard_bytes=1 << 62)
    assert s.disk_guard_message().startswith("no available space")
    with pytest.raises(DiskSpaceError, match="^no available space") as ei:
        s.write_binlog(bl.prewrite(10, b"v"))
    assert ei.value.threshold_bytes == 1 << 62 and ei.value.available_bytes >= 0
    s.write_binlog(bl.commit(4, 5))      # Commits, Rollbacks and fake binlogs get in
    s.write_binlog(bl.rollback(6))
    s.write_binlog(bl.fake(7))
    assert s.flush() and s.max_commit_ts == 7
    assert isinstance(s.available_space_bytes(), int) and s.available_space_bytes() > 0


# -- the async writes ------------------------------------------------------------------------
def test_async_writes_complete_once_durable_and_refuse_at_once(s, tmp_path):
    big = bl.prewrite(20, bytes(range(256)) * 8192, prewrite_key=b"big")   # 2 MiB
    payload = bl.encode(big)

    async def main():
        pending = s.write_binlog_async(bl.prewrite(10, b"v10", prewrite_key=b"k"))
        assert isinstance(pending, asyncio.Future)
        await pending
        await s.write_binlog_async(bl.commit(10, 11))
        with pytest.raises(ProtocolError):       # raised by the call, not the future
            s.write_binlog_async(bl.commit(12, 12))
        spill = SpillFile(tmp_path / "spill")
        spill.write(payload)
        await s.write_binlog_file_async(binlog_header(payload), spill.source(), spill.crc)
        spill.discard()
        await s.write_binlog_async(bl.commit(20, 21), bl.encode(bl.commit(20, 21)))

    asyncio.run(main())
    assert s.flush()
    batch, position = s.pull_commits(0, 64 << 20)
    assert [ts for ts, _ in batch] == [11, 21] and position == 21
    c21 = bl.decode(batch[1][1])
    assert (c21.prewrite_value, c21.prewrite_key) == (big.prewrite_value, b"big")
    assert s.get_binlog(20).prewrite_value == big.prewrite_value


# -- references and range reads ------------------------------------------------------------
def test_references_and_range_reads_serve_the_whole_payload(s):
    value = bytes(range(256)) * 256                           # 64 KiB
    write_pairs(s, (10, 11))
    s.write_binlog(bl.prewrite(12, value, prewrite_key=b"pk"))
    s.write_binlog(bl.commit(12, 13))
    s.write_binlog(bl.fake(14))
    assert s.flush()
    whole = dict(s.pull_commits(0)[0])
    assert bl.decode(whole[13]).prewrite_value == value
    ref_above = 32 << 10
    batch, position = s.pull_commits(0, ref_above=ref_above, node_id="pump-x")
    assert batch == [(11, whole[11]), (13, BinlogRef("pump-x", 13, 12, len(whole[13])))]
    assert position == 13                                      # a reference ends its batch
    assert s.pull_commits(13, ref_above=ref_above, node_id="pump-x") == ([(14, whole[14])], 14)
    # a reference counts REF_ITEM_BYTES against max_bytes: here it does not fit after C(11)
    assert s.pull_commits(0, len(whole[11]) + 1, ref_above=ref_above) == \
        ([(11, whole[11])], 11)
    step = 10_000
    parts = [s.read_payload(13, off, min(step, len(whole[13]) - off))
             for off in range(0, len(whole[13]), step)]
    assert b"".join(bytes(p) for p in parts) == whole[13]
    assert bytes(s.read_payload(11, 0, len(whole[11]))) == whole[11]
    assert bytes(s.read_payload(14, 0, len(whole[14]))) == whole[14]  # a fake binlog too
    for offset, size in ((len(whole[13]) - 1, 2), (-1, 1), (0, -1)):
        with pytest.raises(ProtocolError):
            s.read_payload(13, offset, size)
    for ts in (12, 15):            # a Prewrite's key, nothing at all: nothing served there
        with pytest.raises(StorageError):
            s.read_payload(ts, 0, 1)


# -- GC -----------------------------------------------------------------------------------
def test_gc_moves_gc_ts_and_nothing_below_it_is_served(s):
    write_pairs(s, (10, 11), (20, 21))
    s.write_binlog(bl.fake(30))
    assert s.flush() and s.max_commit_ts == 30
    s.gc(25, wait=True)
    assert s.gc_ts == 25
    with pytest.raises(PurgedError) as ei:
        s.pull_commits(24)
    assert (ei.value.requested_ts, ei.value.gc_ts) == (24, 25)
    assert [ts for ts, _ in s.pull_commits(25)[0]] == [30]
    with pytest.raises(PurgedError):
        s.read_payload(21, 0, 1)
    for ts in (20, 25, 30, 1 << 60):   # not above gc_ts, or not below max_commit_ts: ignored
        s.gc(ts, wait=True)
        assert s.gc_ts == 25
    assert s.stats()["gc_ts"] == 25


# -- waiting ----------------------------------------------------------------------------------
def _in_thread(fn):
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("value", fn()), daemon=True)
    t.start()
    return t, out


def test_wait_for_commit_returns_the_watermark_on_a_commit_a_timeout_or_close(s):
    assert s.wait_for_commit(0, 0.01) == 0                 # timed out: the current value
    waiter, out = _in_thread(lambda: s.wait_for_commit(0, 60))
    write_pairs(s, (10, 11))
    waiter.join(30)
    assert not waiter.is_alive() and out["value"] == 11
    assert s.wait_for_commit(5, 60) == 11                  # already above: at once
    waiter, out = _in_thread(lambda: s.wait_for_commit(11, 60))
    s.close()                                              # wakes the waiter
    waiter.join(30)
    assert not waiter.is_alive() and out["value"] == 11


# -- stats and close ----------------------------------------------------------------------------
def test_stats(s):
    write_pairs(s, (10, 11))
    s.write_binlog(bl.prewrite(20, b"v20"))
    assert s.flush()
    st = s.stats()
    assert {"max_commit_ts", "gc_ts", "pending_prewrites", "writes",
            "available_bytes"} <= set(st)
    assert (st["max_commit_ts"], st["gc_ts"], st["pending_prewrites"], st["writes"]) == \
        (11, 0, 1, 3)
    assert isinstance(st["available_bytes"], int) and st["available_bytes"] > 0


def test_close_refuses_writes_pulls_and_reads_and_is_idempotent(s):
    write_pairs(s, (10, 11))
    assert s.flush()
    s.close()
    s.close()
    with pytest.raises(StorageError, match="closed"):
        s.write_binlog(bl.fake(20))
    with pytest.raises(StorageError, match="closed"):
        s.pull_commits(0)
    with pytest.raises(StorageError, match="closed"):
        s.read_payload(11, 0, 1)
    assert s.wait_for_commit(100, 60) == 11                 # closed: does not wait
