"""reparo end to end on a real local Ray: upstream MariaDB → pump → drainer file sink →
binlog files → ``tidb-binlog reparo`` → fresh MariaDB downstreams, compared with the
upstream (tidb_binlog/compare.py):

- between two workload phases (the upstream quiescent), a ts T is taken and the files
  restored through the CLI into downstream A: A equals the upstream as of T;
- after phase 2 (the files now go past T) a restore with ``stop-tso = T`` into a fresh
  downstream B equals A, i.e. the upstream as of T;
- A continued with ``start-tso = T + 1`` equals the final upstream;
- everything in one run (8 workers) into B, emptied, equals the final upstream;
- phase 2 holds a transaction of 3 000 rows, which the runs after it read in place
  (``large-record-bytes`` = 64 KiB) and apply in chunks;
- a damaged byte in a segment stops the CLI naming the file and the offset;
- the newest file cut short by 3 bytes stops it too (a torn tail), unless
  ``--allow-torn-tail``.

The workloads cover every type family (all_types), a table without primary key, primary
key changes and unique-key swaps (random_dml, applied by several workers) and DDL
interleaved with DML (ddl)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from cluster.drainer import Drainer
from cluster.launch import LocalCluster
from tidb_binlog.compare import compare_databases
from tidb_binlog.config import load_drainer_config
from tidb_binlog.config.reparo import load_reparo_config
from tidb_binlog.reparo.runner import run_reparo
from tidb_binlog.reparo.source import read_records
from tidb_binlog.upstream import Upstream, workload

pytestmark = pytest.mark.timeout(600)

SCHEMAS = ["shop", "wl"]


def assert_equal(up_db, down_db, tables: int):
    up, down = up_db.connect(), down_db.connect()
    try:
        result = compare_databases(up, down, SCHEMAS)
    finally:
        up.close()
        down.close()
    assert result.tables == tables and not result.diffs, [
        (d.database, d.table, d.reason, d.samples[:2]) for d in result.diffs]
    return result


def reparo_toml(path, data_dir, server, **keys) -> str:
    keys = {"worker-count": 4, "txn-batch": 10, **keys}
    lines = [f'data-dir = "{data_dir}"', 'dest-type = "mysql"']
    lines += [f"{k} = {v}" for k, v in keys.items()]
    lines += ["[dest-db]", f'host = "{server.host}"', f"port = {server.port}",
              f'user = "{server.user}"', f'password = "{server.password}"']
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def cli(*args):
    return subprocess.run([sys.executable, "-m", "tidb_binlog.cli.main", "reparo", *args],
                          capture_output=True, text=True, timeout=300)


def test_drainer_files_restore_whole_and_to_a_point(ray_local, mariadb_factory, tmp_path):
    up_db = mariadb_factory("up")
    cluster = LocalCluster(tmp_path / "cluster", pumps=1, upstream_params=up_db.params(),
                           namespace="reparo").start()
    upstream = Upstream(up_db.params(), cluster.pump_client(), cluster.get_ts)
    drainer = None
    try:
        files = tmp_path / "drainer"
        drainer = Drainer.start(load_drainer_config(None, {
            "syncer.db-type": "file", "data-dir": str(files), "initial-commit-ts": 0,
            "addr": "127.0.0.1:0"}), registry=cluster.registry)
        upstream.ddl("CREATE DATABASE shop")
        upstream.ddl("CREATE DATABASE wl")
        # phase 1
        workload.run(upstream, "mixed", database="shop", sessions=2, ops=150, seed=1)
        workload.run(upstream, "all_types", database="wl", sessions=2, ops=40, seed=2)
        workload.run(upstream, "no_pk", database="shop", sessions=2, ops=40, seed=3)
        upstream.flush()
        mid_ts = cluster.get_ts()
        drainer.wait_for_checkpoint(mid_ts, timeout_s=180)

        # restore up to mid_ts through the CLI, compare with the upstream as of mid_ts
        down_a = mariadb_factory("down_a")
        proc = cli("--config", reparo_toml(tmp_path / "a.toml", files, down_a,
                                           **{"stop-tso": mid_ts}))
        assert proc.returncode == 0, proc.stderr
        assert "0 filtered out" in proc.stderr
        assert_equal(up_db, down_a, 3)  # sbtest, nopk, all_types

        # phase 2: key changes, unique-key swaps, DDL between DML, more of phase 1
        workload.run(upstream, "random_dml", database="shop", sessions=2, ops=120, seed=4)
        workload.run(upstream, "ddl", database="shop", sessions=2, ops=40, seed=5)
        workload.run(upstream, "mixed", database="shop", sessions=2, ops=80, seed=6)
        workload.run(upstream, "all_types", database="wl", sessions=1, ops=20, seed=7)
        # one large transaction (3 000 rows, ~700 KB of record): read in place below
        workload.run(upstream, "large", database="shop", ops=1, rows_per_txn=3000, seed=8)
        upstream.flush()
        drainer.wait_for_checkpoint(cluster.get_ts(), timeout_s=180)
        drainer.stop()
        drainer = None

        # the files now go past mid_ts: a restore with stop-tso = mid_ts into a fresh
        # downstream equals the first one (the upstream as of mid_ts)
        down_b = mariadb_factory("down_b")
        cut = run_reparo(load_reparo_config(reparo_toml(
            tmp_path / "b.toml", files, down_b, **{"stop-tso": mid_ts})))
        assert 0 < cut.last_ts <= mid_ts
        a, b = down_a.connect(), down_b.connect()
        compared = compare_databases(a, b, SCHEMAS)
        a.close()
        b.close()
        assert compared.tables == 3 and not compared.diffs, compared.diffs

        # continue the first downstream from mid_ts + 1: equal to the final upstream
        cont = run_reparo(load_reparo_config(reparo_toml(
            tmp_path / "a2.toml", files, down_a, **{"start-tso": mid_ts + 1,
                                                   "large-record-bytes": 65536})))
        assert cont.first_ts > mid_ts and cont.ddls >= 1
        assert cont.large_records == 1  # the large transaction, applied in chunks
        assert_equal(up_db, down_a, 5)  # + rnd, ddlt

        # everything, in one run, into an emptied downstream: equal to the final upstream
        conn = down_b.connect(autocommit=True)
        with conn.cursor() as cur:
            for schema in SCHEMAS:
                cur.execute(f"DROP DATABASE {schema}")
        conn.close()
        full = run_reparo(load_reparo_config(reparo_toml(
            tmp_path / "b2.toml", files, down_b, **{"worker-count": 8,
                                                   "large-record-bytes": 65536})))
        assert full.large_records == 1
        assert full.first_ts < mid_ts < full.last_ts == cont.last_ts
        assert full.records == cut.records + cont.records and full.ddls >= 4
        assert_equal(up_db, down_b, 5)

        # a damaged byte: the CLI stops naming the file and the offset
        broken = tmp_path / "broken"
        shutil.copytree(files, broken, ignore=shutil.ignore_patterns(".lock", "savepoint"))
        segment = sorted(broken.glob("binlog-*"))[0]
        data = bytearray(segment.read_bytes())
        middle = len(data) // 2
        data[middle] ^= 0xFF
        segment.write_bytes(bytes(data))
        proc = cli("--data-dir", str(broken))
        assert proc.returncode == 1
        assert f"corrupt binlog record in {segment} at offset " in proc.stderr, proc.stderr

        # the newest file without its last 3 bytes and no drainer at the copy: the last
        # transaction is lost, the CLI says where (file, offset, the commit_ts before it)
        # and exits 1, unless --allow-torn-tail accepts the cut
        torn = tmp_path / "torn"
        shutil.copytree(files, torn, ignore=shutil.ignore_patterns(".lock", "savepoint"))
        newest = sorted(torn.glob("binlog-*"))[-1]
        os.truncate(newest, newest.stat().st_size - 3)
        proc = cli("--data-dir", str(torn))
        assert proc.returncode == 1, proc.stderr
        assert f"TornTail: {newest} ends in a record cut short at offset " in proc.stderr
        stamps = [rec.commit_ts for _, rec in read_records(files)]
        assert stamps[-1] == full.last_ts  # the cut one; the error names the one before
        assert f"after commit_ts {stamps[-2]} (" in proc.stderr, proc.stderr
        proc = cli("--data-dir", str(torn), "--allow-torn-tail")
        assert proc.returncode == 0, proc.stderr
        assert f"reparo: torn tail accepted (allow-torn-tail): {newest} " in proc.stderr
    finally:
        if drainer is not None:
            drainer.stop()
        upstream.close()
        cluster.stop()
