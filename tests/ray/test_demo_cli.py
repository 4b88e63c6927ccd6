"""``tidb-binlog demo`` through the real command line: arguments an empty run would
hide behind ``diff: 0`` are refused before anything starts, and a workload that dies
stops the demo with exit code 1 and its error, before any comparison."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

CLI = [sys.executable, "-m", "tidb_binlog.cli.main"]


def demo(*args: str, timeout_s: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, "demo", *args], capture_output=True, text=True,
                          timeout=timeout_s)


@pytest.mark.parametrize(("args", "message"), [
    (["--duration", "-5"],
     "argument --duration: must be more than 0 seconds, got -5: an empty run proves nothing"),
    (["--duration", "0"],
     "argument --duration: must be more than 0 seconds, got 0: an empty run proves nothing"),
    (["--duration", "soon"], "argument --duration: expected a number of seconds, got 'soon'"),
    (["--workers", "0"], "argument --workers: must be at least 1, got 0"),
    (["--upstream-fault", "nope=1"],
     "argument --upstream-fault: unknown fault knob 'nope'; known: drop_commit_binlog, "
     "crash_after_prewrite, fail_prewrite"),
])
def test_bad_arguments_are_refused_before_anything_starts(args, message):
    started = time.monotonic()
    got = demo(*args)
    assert got.returncode == 2, got
    assert f"tidb-binlog demo: error: {message}" in got.stderr
    assert got.stdout == ""                     # no "working in", nothing started
    assert time.monotonic() - started < 25      # generous: no Ray, no MariaDB came up


@pytest.mark.slow
def test_a_dying_workload_stops_the_demo_before_any_compare(tmp_path):
    # Every upstream transaction's prewrite binlog fails: each workload's first
    # transaction raises a non-retryable error and its thread dies.
    got = demo("--duration", "20", "--work-dir", str(tmp_path / "demo"),
               "--upstream-fault", "fail_prewrite=-1", timeout_s=240)
    out = got.stdout
    assert got.returncode == 1, (out, got.stderr[-3000:])
    assert "workload failed" in out, out
    # The injected fault is named whichever workload meets it first (a DML's prewrite,
    # or a DDL whose job could not be recorded and was undone); the line is whole, not
    # cut at column 80, because the demo's console never hard-wraps off a terminal.
    assert "fault knob fail_prewrite" in out, out
    assert "demo stopped before comparing" in out
    assert out.index("workload failed") < out.index("demo stopped before comparing")
    assert "compared" not in out and "diff:" not in out, out
