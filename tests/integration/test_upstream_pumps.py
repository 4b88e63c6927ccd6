"""The upstream through the real path: pump client -> two real pump servers -> PullBinlogs.

Two pumps (durable storage, gRPC, HTTP) share one in-process registry with the
upstream (cluster id, TSO, node records) and resolve missing commits through
``UpstreamMeta`` with ``max-txn-timeout = 1`` s. The binlogs pulled back over
gRPC are replayed (our codec) and must give exactly the rows MariaDB holds.
"""

from __future__ import annotations

import itertools

import grpc
import pytest

from tidb_binlog import binlog as bl
from tidb_binlog.codec import (
    Kind,
    datum_for_column,
    decode_old_row,
    decode_value,
    split_insert_row,
    unflatten,
)
from tidb_binlog.config import load_pump_config
from tidb_binlog.errors import ClusterIDMismatch
from tidb_binlog.model import EXTRA_HANDLE_ID, HANDLE_COMMON
from tidb_binlog.node import PUMP
from tidb_binlog.proto import pump_pb2, pump_pb2_grpc
from tidb_binlog.pump.server import open_channel, open_pump
from tidb_binlog.pump_client import PumpClient
from tidb_binlog.testing.collector import BinlogCollector
from tidb_binlog.testing.registry import InMemoryRegistry
from tidb_binlog.upstream import SimulatedCrash, Upstream, UpstreamMeta, workload
from tidb_binlog.upstream.catalog import CATALOG_DB

_names = itertools.count()


@pytest.fixture
def cluster(mariadb_factory, tmp_path):
    """(upstream, registry, pump processes) on a fresh upstream server: its catalog takes
    the registry's cluster id (a catalog keeps the id it was created with)."""
    registry = InMemoryRegistry()
    params = mariadb_factory("pumps").params()
    pumps = []
    for i in range(2):
        cfg = load_pump_config(None, {
            "data-dir": str(tmp_path / f"pump{i}"), "addr": "127.0.0.1:0", "node-id": f"pump-{i}",
            "cluster-id": registry.cluster_id(), "gen-binlog-interval": 0.2,
            "max-txn-timeout": 1, "storage.stop-write-at-available-space": 1 << 20})
        pumps.append(open_pump(cfg, registry=registry, resolver=UpstreamMeta(params),
                               status_addr="127.0.0.1:0"))
    client = PumpClient(registry, probe_interval_s=3600)
    db = f"pumps{next(_names)}"
    up = Upstream(params, client, registry.get_ts, database=db, cluster_id=registry.cluster_id())
    up.ddl(f"CREATE DATABASE {db}")
    yield up, registry, pumps
    up.flush()
    up.close()
    client.close()
    for p in pumps:
        p.stop()


def committed(up) -> dict[int, int]:
    """start_ts -> commit_ts of every committed binlog transaction, as MariaDB records it."""
    with up.session() as s:
        t = s.begin()
        rows = t.query(f"SELECT start_ts, commit_ts FROM {CATALOG_DB}.txn_status")
        t.rollback()
    assert all(c > 0 for _, c in rows), "a finished transaction left a status row without commit_ts"
    return dict(rows)


def pull(pump, cluster_id: int, through_ts: int, budget_s: float = 60.0) -> list[bl.Binlog]:
    """Every non-fake binlog the pump serves up to ``through_ts`` (its fake binlogs carry
    its watermark past it), via gRPC PullBinlogs."""
    stub = pump_pb2_grpc.PumpStub(open_channel(pump.addr))
    call = stub.PullBinlogs(pump_pb2.PullBinlogReq(clusterID=cluster_id,
                                                   startFrom=pump_pb2.Pos(offset=0)),
                            timeout=budget_s)
    out, last = [], 0
    try:
        for resp in call:
            e = resp.entity
            assert e.pos.offset > last, "a pump served commit_ts out of order"
            last = e.pos.offset
            b = bl.decode(e.payload)
            if b.start_ts != b.commit_ts:
                assert b.tp == bl.BinlogType.COMMIT and b.commit_ts == e.pos.offset
                out.append(b)
            if last >= through_ts:
                break
    except grpc.RpcError as exc:
        pytest.fail(f"pump {pump.node.node_id} served up to {last}, not {through_ts}: {exc}")
    finally:
        call.cancel()
    return out


def pull_all(up, registry, pumps) -> list[bl.Binlog]:
    up.flush()
    status = committed(up)
    through = max(status.values())
    binlogs = [b for p in pumps for b in pull(p, registry.cluster_id(), through)]
    got = {b.start_ts: b.commit_ts for b in binlogs if b.commit_ts <= through}
    assert got == status  # each committed txn exactly once, at MariaDB's commit_ts
    return sorted(binlogs, key=lambda b: b.commit_ts)


def _handle(codec, row: dict):
    if codec.kind == "rowid":
        return row[EXTRA_HANDLE_ID].value
    return row[codec.columns[codec.pk_offsets[0]].id].value


def replay(up, binlogs: list[bl.Binlog]) -> dict[int, dict]:
    """table id -> {handle: {column id: raw datum}} after applying every DML binlog."""
    tables: dict[int, dict] = {}
    codecs = {info.id: up.codec(info) for info in up.snapshot.tables.values()}
    for b in binlogs:
        if b.ddl_job_id:
            continue
        for m in bl.decode_prewrite_value(b.prewrite_value).mutations:
            codec, rows = codecs[m.table_id], tables.setdefault(m.table_id, {})
            assert codec.kind != HANDLE_COMMON, "replay covers int and row-id handles"
            lists = {bl.MutationType.INSERT: iter(m.inserted_rows),
                     bl.MutationType.UPDATE: iter(m.updated_rows),
                     bl.MutationType.DELETE_ROW: iter(m.deleted_rows)}
            for tp in m.sequence:
                raw = next(lists[tp])
                if tp == bl.MutationType.INSERT:
                    [h], rest = split_insert_row(raw, 1)
                    row = decode_old_row(rest)
                    if codec.kind == "int":
                        row[codec.columns[codec.pk_offsets[0]].id] = h
                    assert h.value not in rows, f"insert of an existing handle {h.value}"
                    rows[h.value] = row
                elif tp == bl.MutationType.UPDATE:
                    ds = decode_value(raw)
                    half = len(ds) // 2
                    old = {ds[i].value: ds[i + 1] for i in range(0, half, 2)}
                    new = {ds[i].value: ds[i + 1] for i in range(half, len(ds), 2)}
                    assert _handle(codec, old) == _handle(codec, new)
                    assert rows.pop(_handle(codec, old)) is not None
                    rows[_handle(codec, new)] = new
                else:
                    del rows[_handle(codec, decode_old_row(raw))]
    return tables


def assert_replay_matches_mariadb(up, tables: dict[int, dict], names: list[str]) -> int:
    checked = 0
    for name in names:
        info = up.table(name)
        codec = up.codec(info)
        with up.session() as s:
            t = s.begin()
            mariadb_rows = t.query(f"SELECT {codec.select_list} FROM `{name}`")
            t.rollback()
        model = tables.get(info.id, {})
        assert sorted(model) == sorted(int(codec.handle(r)) for r in mariadb_rows), name
        for r in mariadb_rows:
            got = model[int(codec.handle(r))]
            for c, value in zip(info.cols, r, strict=False):
                ft = c.type.to_codec()
                want = datum_for_column(value, ft)
                have = unflatten(got[c.id], ft) if c.id in got else None
                if have is None:
                    assert want.kind is Kind.NULL, (name, c.name.O)
                elif {have.kind, want.kind} <= {Kind.STRING, Kind.BYTES}:
                    assert have.value == want.value, (name, c.name.O)
                else:
                    assert have == want, (name, c.name.O)
            checked += 1
    return checked


def test_workloads_through_two_pumps_decode_to_the_rows_mariadb_holds(cluster):
    up, registry, pumps = cluster
    assert {n.node_id for n in registry.nodes(PUMP)} == {"pump-0", "pump-1"}
    for kind in ("mixed", "random_dml", "no_pk"):
        stats = workload.run(up, kind, sessions=2, ops=60, seed=5)
        assert stats.txns == 60, stats
    binlogs = pull_all(up, registry, pumps)
    by_pump = [len(pull(p, registry.cluster_id(), binlogs[-1].commit_ts)) for p in pumps]
    assert all(n > 0 for n in by_pump), by_pump  # range routing spread them
    rows = assert_replay_matches_mariadb(up, replay(up, binlogs), ["sbtest", "rnd", "nopk"])
    assert rows > 50


def test_missing_commits_are_resolved_by_the_pumps_through_upstream_meta(cluster):
    up, registry, pumps = cluster
    up.ddl("CREATE TABLE f (id INT PRIMARY KEY, v INT)")
    with up.session() as s:
        with s.begin() as t:
            t.insert("f", [{"id": 1, "v": 1}])
        up.faults.arm(drop_commit_binlog=2)  # TiDB died after COMMIT, twice
        for i in (2, 3):
            with s.begin() as t:
                t.insert("f", [{"id": i, "v": i}])
        dropped = t.start_ts
        up.faults.arm(crash_after_prewrite=1)  # TiDB died between prewrite and COMMIT
        with pytest.raises(SimulatedCrash), s.begin() as t:
            t.insert("f", [{"id": 4, "v": 4}])
        crashed = t.start_ts
    with up.session() as s, s.begin() as t:
        t.update("f", {"v": 30}, "id = 3")
    binlogs = pull_all(up, registry, pumps)  # served only once both pumps resolved theirs
    assert dropped in {b.start_ts for b in binlogs}
    assert crashed not in {b.start_ts for b in binlogs}
    assert up.meta().txn_status(crashed).state == "rolled_back"
    assert assert_replay_matches_mariadb(up, replay(up, binlogs), ["f"]) == 3
    assert sum(p.node.metrics.registry.get_sample_value("binlog_pump_storage_query_tikv_count_total")
               or 0 for p in pumps) >= 3


def test_cluster_id_is_adopted_once_and_a_different_one_refused(mariadb_factory):
    server = mariadb_factory("cid")
    big = (1 << 64) - 5  # registry ids use all 64 bits
    with Upstream(server.params(), BinlogCollector(), lambda: 1, cluster_id=big) as up:
        assert up.cluster_id == big
    assert UpstreamMeta(server.params()).cluster_id() == big
    with Upstream(server.params(), BinlogCollector(), lambda: 1) as up:
        assert up.cluster_id == big
    with pytest.raises(ClusterIDMismatch) as info:
        Upstream(server.params(), BinlogCollector(), lambda: 1, cluster_id=7)
    assert f"already has cluster id {big}" in str(info.value)
    assert (info.value.expected, info.value.got) == (big, 7)
