"""A drainer task reading a pump whose sealed value-log file was damaged (a flipped byte
in an acknowledged Commit): the task must stop before that binlog with the pump's error
in its status, never replicate past it (it used to skip the transaction silently)."""

from __future__ import annotations

import pytest
from drainer_helpers import SHOP_DDL, drainer_config, rows, wait_until, write

from cluster.drainer import Drainer
from cluster.launch import PumpOptions
from tidb_binlog import binlog as bl
from tidb_binlog.pump.storage import Storage, StorageOptions
from tidb_binlog.pump.storage.metrics import StorageMetrics
from tidb_binlog.pump.storage.vlog_record import FILE_END_MAGIC, ScanResult, scan_segment
from tidb_binlog.testing.stack import StackSpec

pytestmark = pytest.mark.timeout(300)


# small value-log files: the writes below fill and seal several
STACK = StackSpec(pumps=1, ddl=SHOP_DDL,
                  pump_options=PumpOptions(extra={"storage.value-log-file-size": 2048}))


def _stored_commits(data_dir) -> list[tuple[int, bl.Binlog]]:
    s = Storage(data_dir, StorageOptions(stop_write_at_available_space_bytes=0),
                metrics=StorageMetrics())
    try:
        return [(ts, bl.decode(p)) for ts, p in s.pull_commit_binlogs(0, 1 << 30, 1 << 30)]
    finally:
        s.close()


def test_drainer_stops_before_a_damaged_binlog_and_says_so(ray_local, stack, tmp_path):
    up_db, down_db, cluster, upstream = stack
    write(upstream, 0, 40)
    upstream.flush()  # every Commit acknowledged (durable) by the pump
    pump = cluster.pumps["pump-0"]
    ray_local.get(pump.stop.remote())
    ray_local.kill(pump, no_restart=True)
    data_dir = cluster.work_dir / "pump-0"
    commits = _stored_commits(data_dir)
    sealed = [p for p in sorted((data_dir / "value").glob("*.vlog"))
              if int.from_bytes(p.read_bytes()[-4:], "little") == FILE_END_MAGIC]
    assert len(sealed) >= 2, sealed
    target = sealed[-1]
    raw = bytearray(target.read_bytes())
    recs = [r for r in scan_segment(bytes(raw), 0, len(raw) - 12, ScanResult())
            if bl.decode(r[2]).tp == bl.BinlogType.COMMIT]
    off, size, payload = recs[-1]
    victim = bl.decode(payload).commit_ts
    raw[off + size - 1] ^= 0xFF
    target.write_bytes(bytes(raw))
    dml_before = sum(1 for ts, b in commits if ts < victim and not bl.is_fake(b)
                     and not b.ddl_query)
    assert 0 < dml_before < 40

    cluster.start_pump("pump-0")
    drainer = Drainer.start(drainer_config(stack), registry=cluster.registry)
    try:
        st = wait_until(lambda: (s := drainer.status())["state"] == "failed" and s,
                        timeout_s=180, what="the task to stop at the damaged binlog")
    finally:
        drainer.stop()
    assert st["error"].startswith(
        f"DamagedBinlog: pump pump-0 cannot serve an acknowledged binlog: pump storage cannot "
        f"serve the binlog at ts {victim} (value log {target}: checksum mismatch at offset "
        f"{off}); "), st["error"]
    assert "skip-damaged-ts" in st["error"] and "restore this pump's data dir" in st["error"]
    assert st["checkpoint_commit_ts"] < victim
    assert len(rows(down_db, "shop.t")) == dml_before  # nothing past the gap
