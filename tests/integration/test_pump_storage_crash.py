"""kill -9 a process writing to the storage; reopen; every acknowledged binlog is served
exactly once, in commit order (also after cutting the last record or flipping a byte:
then the damaged transaction's binlogs stop the pull with DamagedBinlog, never skipped
silently, unless the resolver could write its lost Commit again)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tidb_binlog import binlog as bl
from tidb_binlog.errors import DamagedBinlog
from tidb_binlog.node import TxnStatus
from tidb_binlog.pump.storage import Storage, StorageOptions
from tidb_binlog.pump.storage.metrics import StorageMetrics
from tidb_binlog.pump.storage.vlog_record import (
    FILE_END_MAGIC,
    HEADER_SIZE,
    ScanResult,
    scan_segment,
)

pytestmark = pytest.mark.integration

CHILD = r"""
import os, sys, threading
from tidb_binlog import binlog as bl
from tidb_binlog.errors import DamagedBinlog
from tidb_binlog.pump.storage import Storage, StorageOptions
from tidb_binlog.pump.storage.metrics import StorageMetrics
from tidb_binlog.tso import TimestampOracle

data_dir, file_size = sys.argv[1], int(sys.argv[2])
s = Storage(data_dir, StorageOptions(stop_write_at_available_space_bytes=0,
                                     value_log_file_size_bytes=file_size),
            metrics=StorageMetrics())
tso = TimestampOracle()

def say(line):
    os.write(1, (line + "\n").encode())  # one write: lines never interleave

def writer():
    while True:
        start = tso.get_ts()
        s.write_binlog(bl.prewrite(start, b"v%d" % start * 100, prewrite_key=b"k%d" % start))
        say(f"P {start}")
        commit = tso.get_ts()
        s.write_binlog(bl.commit(start, commit))
        say(f"C {start} {commit}")

for _ in range(8):
    threading.Thread(target=writer, daemon=True).start()
say("READY")
threading.Event().wait()
"""

ACKED_COMMITS_BEFORE_KILL = 400


def _value(start_ts: int) -> bytes:
    return b"v%d" % start_ts * 100


def _run_and_kill(data_dir: Path, file_size: int) -> tuple[dict[int, int], set[int]]:
    """Start the writer child, SIGKILL it mid-load; return acked commits and prewrites."""
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(data_dir), str(file_size)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    commits: dict[int, int] = {}
    prewrites: set[int] = set()

    def take(line: bytes) -> None:
        parts = line.split()
        if parts and parts[0] == b"C":
            commits[int(parts[1])] = int(parts[2])
        elif parts and parts[0] == b"P":
            prewrites.add(int(parts[1]))

    try:
        deadline = time.monotonic() + 120
        while len(commits) < ACKED_COMMITS_BEFORE_KILL:
            line = proc.stdout.readline()
            if not line:
                raise AssertionError(f"writer child exited early: {proc.stderr.read().decode()}")
            assert time.monotonic() < deadline, "writer child too slow"
            take(line)
    finally:
        proc.send_signal(signal.SIGKILL)
        rest, _ = proc.communicate(timeout=60)
    for line in rest.splitlines():
        take(line)  # acknowledged before the kill, read after it
    assert proc.returncode == -signal.SIGKILL
    return commits, prewrites


def _records(path: Path) -> list[tuple[int, int, bl.Binlog]]:
    raw = path.read_bytes()
    end = len(raw)
    if end >= 12 and int.from_bytes(raw[-4:], "little") == FILE_END_MAGIC:
        end -= 12
    return [(off, size, bl.decode(p)) for off, size, p in scan_segment(raw, 0, end, ScanResult())]


def _pull_all(s: Storage) -> tuple[list[tuple[int, bytes]], list[int]]:
    """Everything served, stepping over each DamagedBinlog (as an operator's skip would);
    returns the served binlogs and the damaged ts met."""
    served: list[tuple[int, bytes]] = []
    damaged: list[int] = []
    since = 0
    while since < s.max_commit_ts:
        try:
            batch, since = s.pull_commits(since, max_bytes=1 << 30, max_count=1 << 30)
        except DamagedBinlog as exc:
            damaged.append(exc.ts)
            since = exc.ts
            continue
        served.extend(batch)
    return served, damaged


class TruthResolver:
    """The upstream's answer: committed if the child was told so, otherwise rolled back."""

    def __init__(self, commits: dict[int, int]):
        self.commits = commits

    def txn_status(self, start_ts, prewrite_key):
        if start_ts in self.commits:
            return TxnStatus(TxnStatus.COMMITTED, self.commits[start_ts])
        return TxnStatus(TxnStatus.ROLLED_BACK)


@pytest.mark.parametrize("damage,file_size", [("none", 256 * 1024), ("truncate_last", 256 * 1024),
                                              ("flip_middle", 500 * 2**20)])
def test_kill9_every_acknowledged_binlog_served_once_in_order(tmp_path, damage, file_size):
    commits, prewrites = _run_and_kill(tmp_path, file_size)
    assert set(commits) <= prewrites  # a commit is written only after its prewrite was acked
    files = sorted((tmp_path / "value").glob("*.vlog"))
    if file_size < 500 * 2**20:
        assert len(files) >= 2, "the load should have rotated the value log"
    # The one transaction whose record we damage may be lost (a single copy is kept): a
    # damaged Prewrite makes its Commit unservable; a damaged Commit is recovered through
    # the resolver only if its Prewrite still waits. A pull stops at what is lost with
    # DamagedBinlog (naming the ts); everything else must be served.
    lost: set[int] = set()
    last = files[-1]
    recs = _records(last)
    if damage == "truncate_last":
        off, size, victim = recs[-1]
        with open(last, "r+b") as f:
            f.truncate(off + HEADER_SIZE + (size - HEADER_SIZE) // 2)
        lost.add(victim.start_ts)
    elif damage == "flip_middle":
        off, size, victim = recs[len(recs) // 2]
        with open(last, "r+b") as f:
            f.seek(off + HEADER_SIZE + (size - HEADER_SIZE) // 2)
            byte = f.read(1)
            f.seek(-1, os.SEEK_CUR)
            f.write(bytes([byte[0] ^ 0xFF]))
        lost.add(victim.start_ts)
    metrics = StorageMetrics()
    opts = StorageOptions(stop_write_at_available_space_bytes=0, max_txn_timeout_s=0.2,
                          resolve_interval_s=0.05, value_log_file_size_bytes=file_size)
    s = Storage(tmp_path, opts, resolver=TruthResolver(commits), metrics=metrics)
    try:
        deadline = time.monotonic() + 60
        while not (s.all_matched() and s.max_commit_ts >= max(commits.values())):
            assert time.monotonic() < deadline, s.stats()
            s.wait_for_commit(s.max_commit_ts, 0.1)
        served, damaged = _pull_all(s)
        if damage == "flip_middle":
            assert metrics.value("binlog_pump_storage_corruption_skipped_bytes_total") > 0
    finally:
        s.close()
    if damage == "none":
        assert damaged == []
    else:  # the victim's own key, or its commit's (whose prewrite is the victim)
        assert set(damaged) <= {victim.start_ts, victim.commit_ts, commits.get(victim.start_ts)}
    tss = [ts for ts, _ in served]
    assert tss == sorted(set(tss)), "served out of order or twice"
    by_start = {}
    for ts, payload in served:
        b = bl.decode(payload)
        assert b.tp == bl.BinlogType.COMMIT and b.commit_ts == ts
        assert b.prewrite_value == _value(b.start_ts) and b.prewrite_key == b"k%d" % b.start_ts
        assert b.start_ts not in by_start
        by_start[b.start_ts] = ts
    expected = {st: c for st, c in commits.items() if st not in lost}
    missing = {st: c for st, c in expected.items() if by_start.get(st) != c}
    assert not missing, f"acknowledged commits not served: {sorted(missing.items())[:5]}"
    if damage != "none" and victim.tp == bl.BinlogType.PREWRITE:
        assert victim.start_ts not in by_start, "a commit whose prewrite is damaged was served"
