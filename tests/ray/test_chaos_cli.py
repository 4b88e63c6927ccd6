"""A short seeded ``tidb-binlog chaos`` run through the real command line: a few faults
of different kinds (kill -9 of a pump and of the downstream MariaDB, a Ray restart, a
pump paused over HTTP) and every end check (diff, audit, bank invariant) passes.

It runs in a subprocess because the soak starts and shuts down its own Ray."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]


def test_a_short_seeded_soak_passes_and_reports(tmp_path):
    run_dir = tmp_path / "run"
    cmd = [sys.executable, "-m", "tidb_binlog.cli.main", "chaos", "--seed", "3",
           "--duration", "50", "--work-dir", str(run_dir), "--keep",
           "--faults", "kill9-pump,kill9-downstream-db,restart-actor,pause-pump",
           "--fault-timeout", "150", "--recovered-lag", "2"]
    got = subprocess.run(cmd, capture_output=True, text=True, timeout=400)
    out = got.stdout
    assert got.returncode == 0, (out, got.stderr[-4000:])
    m = re.search(r"RESULT chaos faults=(\d+) diff=0 lost=0 dup=0 recovery_p99_s=[\d.]+", out)
    assert m, out
    assert int(m.group(1)) >= 2, out
    result = json.loads((run_dir / "result.json").read_text())
    assert result["ok"] is True and result["seed"] == 3
    kinds = {f["kind"] for f in result["faults"]}
    assert len(kinds) >= 2, result["faults"]
    assert all(f["recovery_s"] is not None for f in result["faults"])
    assert (run_dir / "REPLAY").read_text().startswith("tidb-binlog chaos --seed 3 --duration 50")
    schedule = json.loads((run_dir / "schedule.json").read_text())
    assert [f["kind"] for f in schedule[:len(result["faults"])]] == [
        f["kind"] for f in result["faults"]]


def test_a_failed_soak_exits_1_and_keeps_what_is_needed_to_replay_it(tmp_path):
    # A fault timeout no recovery can meet: the first fault counts as not recovered.
    run_dir = tmp_path / "run"
    cmd = [sys.executable, "-m", "tidb_binlog.cli.main", "chaos", "--seed", "9",
           "--duration", "15", "--work-dir", str(run_dir), "--faults", "kill9-worker",
           "--fault-timeout", "0.001"]
    got = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    out = got.stdout
    assert got.returncode == 1, (out, got.stderr[-4000:])
    assert "chaos run failed" in out and str(run_dir) in out
    assert re.search(r"RESULT chaos faults=1 diff=0 lost=0 dup=0", out), out
    result = json.loads((run_dir / "result.json").read_text())
    assert result["ok"] is False and result["verdict"]["unrecovered"] == 1
    assert (run_dir / "REPLAY").read_text().strip() == (
        "tidb-binlog chaos --seed 9 --duration 15 --workers 4 --recovered-lag 1 "
        "--fault-timeout 0.001 --faults kill9-worker")
    assert "NOT recovered" in (run_dir / "events.log").read_text()
    assert (run_dir / "chaos.log").stat().st_size > 0
    assert (run_dir / "logs" / "ray").is_dir()
    for name in ("upstream", "downstream"):
        assert (run_dir / "logs" / f"mariadb-{name}-error.log").stat().st_size > 0
