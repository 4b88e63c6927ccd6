"""The Parquet sink end to end on a real local Ray: upstream MariaDB → 2 PumpActors → merger →
ParquetKeeperActor → ParquetSinkActor → a Parquet lake, read back with pyarrow through the
manifest only: every committed change is there once, in commit order, with exact values of
every MySQL type family, across a DDL, a large transaction read by the keeper by reference; and with the sink actor killed by SIGKILL mid-load
(twice): nothing lost, nothing twice."""

from __future__ import annotations

import json
import os
import signal
from collections import Counter

import pyarrow.parquet as pq
import pytest
from test_file_sink import SHOP_T_DDL, Writer, _sink_pid, _wait_checkpoint, upstream_rows

from cluster.drainer import Drainer
from tidb_binlog.config import load_drainer_config
from tidb_binlog.drainer.sinks.parquet.manifest import committed_files, read_manifest
from tidb_binlog.testing.stack import StackSpec
from tidb_binlog.upstream import workload

pytestmark = pytest.mark.timeout(400)


STACK = StackSpec(pumps=2, namespace="parquet-sink", downstream=False, ddl=SHOP_T_DDL)


def parquet_config(stack, **extra):
    """db-type parquet into the test's ``data_dir`` (the lake), from its ``start_ts``."""
    overrides = {"syncer.db-type": "parquet", "data-dir": str(stack.data_dir),
                 "initial-commit-ts": stack.start_ts, "addr": "127.0.0.1:0"}
    overrides.update(extra)
    return load_drainer_config(None, overrides)


def changes(lake, database: str, table: str) -> list[dict]:
    """Every committed change of the table, in commit order (files are listed in commit
    order; within a file rows are in commit order)."""
    rows = []
    for path in committed_files(lake, database, table):
        rows.extend(pq.read_table(path).to_pylist())
    tss = [r["commit_ts"] for r in rows]
    assert tss == sorted(tss), "changes out of commit order"
    return rows


def replay(rows: list[dict], key: str) -> dict:
    state: dict = {}
    for r in rows:
        if r["op"] in ("update", "delete"):
            del state[r["before"][key]]
        if r["op"] in ("insert", "update"):
            state[r["after"][key]] = r["after"]
    return state


def check_shop(lake, up_db, commit_tss) -> None:
    rows = changes(lake, "shop", "t")
    ident = Counter((r["commit_ts"], r["op"], (r["after"] or r["before"])["id"]) for r in rows)
    assert max(ident.values()) == 1, "a change is in the lake twice"
    missing = set(commit_tss) - {r["commit_ts"] for r in rows}
    assert not missing, f"{len(missing)} committed transactions are not in the lake"
    got = {k: (v["name"], v["amount"]) for k, v in replay(rows, "id").items()}
    want = {i: (n, a) for i, n, a in upstream_rows(up_db, "SELECT id, name, amount FROM shop.t")}
    assert got == want


ALL_COLUMNS = ("id", "b", "t", "tu", "s", "m", "i", "iu", "bi", "bu", "f", "d", "de", "bt", "da",
               "dt", "ts", "tm", "y", "c", "vc", "bn", "bl", "tx", "e", "st", "j")


def test_workload_with_all_types_and_ddl_into_the_lake(stack, ray_local):
    up_db, _, cluster, upstream = stack
    started, lake = stack.started, stack.data_dir
    upstream.ddl("CREATE DATABASE wl")
    # txn-chunk-rows 20: the larger transactions stream through the keeper and the sink in
    # chunks, spilled (flush-rows 30) and listed only with their last chunk; a binlog of
    # 2 KiB or more (the large transaction below) reaches the keeper by reference, read
    # from its PumpActor in ranges
    drainer = Drainer.start(parquet_config(stack, **{"syncer.txn-chunk-rows": 20,
                                                    "syncer.to.parquet.flush-rows": 30,
                                                    "syncer.large-binlog-bytes": 2 << 10}),
                            registry=cluster.registry)
    started.append(drainer)
    writer = Writer(upstream).start()
    try:
        workload.run(upstream, "all_types", database="wl", sessions=2, ops=60, seed=3)
        writer.wait_txns(100)
    finally:
        writer.stop()
    upstream.ddl("ALTER TABLE shop.t ADD COLUMN note VARCHAR(8) DEFAULT 'x'")
    with upstream.session("shop") as s:  # rows of the new table version
        for k in range(10_000, 10_030):
            txn = s.begin()
            txn.insert("t", [{"id": k, "name": f"n{k}", "amount": "1.05", "note": "y"}])
            txn.update("t", {"note": "z"}, "id = %s", (k - 1,))
            writer.commit_tss.append(txn.commit())
        txn = s.begin()  # a large transaction: 4 chunks
        txn.insert("t", [{"id": k, "name": f"b{k}", "amount": "2.50", "note": "big"}
                         for k in range(20_000, 20_075)])
        big_ts = txn.commit()
        writer.commit_tss.append(big_ts)
    upstream.flush()
    drainer.wait_for_checkpoint(cluster.get_ts(), timeout_s=180)
    refs = ray_local.get(drainer.keeper.ref_stats.remote(), timeout=60)
    assert refs["refs"] >= 1 and refs["whole"] == 0 and refs["reads"] >= 2, refs
    final = drainer.stop()
    started.remove(drainer)
    assert final["consistent"] is True
    manifest = read_manifest(lake)
    assert manifest.commit_ts == final["commit_ts"]

    check_shop(lake, up_db, writer.commit_tss)
    assert sum(r["commit_ts"] == big_ts for r in changes(lake, "shop", "t")) == 75
    assert not list(lake.rglob("*.tmp"))
    big_file = next(f for f in manifest.files if f["min_commit_ts"] <= big_ts
                    <= f["max_commit_ts"] and f["table"] == "t")
    # spilled chunk by chunk: a row group per spill (written whole, it would be one)
    assert pq.ParquetFile(lake / big_file["path"]).metadata.num_row_groups >= 2
    versions = [s for s in manifest.schemas if s["table"] == "t"]
    assert len(versions) == 2 and "note" in [c["name"] for c in versions[1]["columns"]]
    # what a reader fills the rows written before the ADD COLUMN with, and the key
    assert versions[1]["columns"][-1] == {"name": "note", "mysql_type": "varchar",
                                          "arrow_type": "string", "nullable": True,
                                          "default": "x"}
    assert versions[1]["primary_key"] == ["id"] and versions[1]["handle"] == "int"
    alter = [d for d in manifest.ddls if "ADD COLUMN note" in d["query"]]
    assert len(alter) == 1 and alter[0]["database"] == "shop"
    assert all(f["schema_version"] == versions[1]["schema_version"]
               for f in manifest.files if f["table"] == "t"
               and f["min_commit_ts"] > alter[0]["commit_ts"])

    got = replay(changes(lake, "wl", "all_types"), "id")
    want = upstream_rows(up_db, f"SELECT {', '.join(ALL_COLUMNS)} FROM wl.all_types")
    assert len(got) == len(want) == 60
    for values in want:
        up = dict(zip(ALL_COLUMNS, values, strict=True))
        row = got[up["id"]]
        j = row.pop("j")
        assert json.loads(j) == json.loads(up.pop("j"))
        up["st"] = ",".join(sorted(up["st"])) if isinstance(up["st"], set) else up["st"]
        if up["f"] is not None:
            up["f"] = float(up["f"])
        assert {k: row[k] for k in up} == up


def test_sink_killed_mid_load_loses_and_duplicates_nothing(stack, ray_local):
    up_db, _, cluster, upstream = stack
    started, lake = stack.started, stack.data_dir
    cfg = parquet_config(stack, **{"syncer.to.parquet.flush-interval": 0.2,
                                  "syncer.to.parquet.flush-rows": 40})
    drainer = Drainer.start(cfg, registry=cluster.registry)
    started.append(drainer)
    writer = Writer(upstream).start()
    try:
        for _ in range(2):
            writer.wait_txns(len(writer.commit_tss) + 100)
            pid = _sink_pid(ray_local, drainer)
            _wait_checkpoint(ray_local, drainer, writer.commit_tss[-20])
            os.kill(pid, signal.SIGKILL)                                 # kill -9
        writer.wait_txns(len(writer.commit_tss) + 100)
    finally:
        writer.stop()
    upstream.flush()
    st = _wait_checkpoint(ray_local, drainer, cluster.get_ts())
    assert st["resets"] >= 2, st
    drainer.stop()
    started.remove(drainer)
    check_shop(lake, up_db, writer.commit_tss)
    listed = {f["path"] for f in read_manifest(lake).files}
    on_disk = {p.relative_to(lake).as_posix() for p in lake.rglob("*.parquet")}
    assert on_disk == listed  # leftovers of a cut flush were removed
