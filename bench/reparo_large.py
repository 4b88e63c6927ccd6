"""reparo's peak memory for one large transaction against the record's size (one run).

Writes a file-sink directory (:class:`~tidb_binlog.binlogfile.Binlogger`, as the drainer's
file sink does) holding ``CREATE DATABASE``, ``CREATE TABLE sbtest`` and ONE DML record of
``--rows`` inserts (sysbench-shaped rows: ``id``, ``k``, ``c`` 119 digits, ``pad`` 59
digits, ~190 bytes of data each), then runs ``tidb-binlog reparo --config`` on it in a
child process into a throwaway MariaDB (``--dest mysql``, the default) or printing to
/dev/null (``--dest print``), and reads the child's peak RSS (its ``VmHWM``, which
it writes at exit; ``ru_maxrss`` would include the forked copy of this process). The same child on a directory with a one-row transaction gives the baseline
(the interpreter and its imports); growth = peak - baseline, also as a multiple of the
record's payload size. The downstream row count is checked.

``--code DIR`` runs the child on another checkout's ``tidb_binlog`` (``PYTHONPATH=DIR``,
e.g. ``git archive <commit> | tar -x -C DIR``) to measure a version before a change;
``--large-record-bytes`` sets reparo.toml's key (left out when not given: the default,
8 MiB; a version without the key must not be given it).

Prints, last::

    RESULT reparo_large rows=<n> record_mb=<mb> dest=<d> seconds=<s> peak_mb=<mb>
           baseline_mb=<mb> growth_mb=<mb> growth_x=<x> load=<1-min load average>

    .venv/bin/python bench/reparo_large.py --rows 250000
    .venv/bin/python bench/reparo_large.py --rows 250000 --large-record-bytes 0   # whole
    .venv/bin/python bench/reparo_large.py --rows 250000 --code /tmp/before
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import string
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tidb_binlog.binlogfile import Binlogger
from tidb_binlog.codec import Datum, encode_value
from tidb_binlog.drainer.translate.pb import ddl_record
from tidb_binlog.proto import pb_binlog_pb2 as pb

DB = "bench_reparo"
DDL = ("CREATE TABLE sbtest (id BIGINT PRIMARY KEY, k INT NOT NULL, c CHAR(120) NOT NULL, "
       "pad CHAR(60) NOT NULL)")


def _col(name: str, tp: int, mysql_type: str, datum) -> bytes:
    return pb.column(name=name, tp=bytes((tp,)), mysql_type=mysql_type,
                     value=encode_value([datum])).SerializeToString()


def big_record(ts: int, rows: int, seed: int = 1) -> bytes:
    rng = random.Random(seed)
    b = pb.Binlog(tp=pb.DML, commit_ts=ts)
    for i in range(1, rows + 1):
        ev = b.dml_data.events.add(schema_name=DB, table_name="sbtest", tp=pb.Insert)
        ev.row.extend([
            _col("id", 8, "bigint", Datum.int64(i)),
            _col("k", 3, "int", Datum.int64(rng.randrange(1, 100_000))),
            _col("c", 254, "char", Datum.bytes("".join(rng.choices(string.digits,
                                                                   k=119)).encode())),
            _col("pad", 254, "char", Datum.bytes("".join(rng.choices(string.digits,
                                                                     k=59)).encode()))])
    return b.SerializeToString()


def write_dir(d: Path, rows: int) -> int:
    """The directory for ``rows``; the DML record's payload size."""
    payload = big_record(30, rows)
    with Binlogger(d) as b:
        b.write_many([ddl_record(10, "", f"CREATE DATABASE {DB}"), ddl_record(20, DB, DDL),
                      payload])
        b.sync()
    return len(payload)


_CHILD = """
import atexit, sys
toml, out = sys.argv[1:]
def hwm():
    with open("/proc/self/status") as f, open(out, "w") as o:
        o.write(next(line for line in f if line.startswith("VmHWM:")).split()[1])
atexit.register(hwm)
from tidb_binlog.cli.main import main
sys.exit(main(["reparo", "--config", toml]))
"""


def run_child(toml: Path, code: str | None) -> tuple[float, float]:
    """``tidb-binlog reparo --config toml`` in a child: (seconds, peak RSS in MB)."""
    env = dict(os.environ)
    if code:
        env["PYTHONPATH"] = code + os.pathsep + env.get("PYTHONPATH", "")
    out = toml.with_suffix(".hwm")
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(toml), str(out)], env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=code or None)
    seconds = time.perf_counter() - started
    if proc.returncode:
        raise SystemExit(f"reparo failed ({proc.returncode}):\n"
                         f"{proc.stderr.decode(errors='replace')}")
    return seconds, int(out.read_text()) / 1024


def toml_text(d: Path, args, server) -> str:
    lines = [f'data-dir = "{d}"', f'dest-type = "{args.dest}"', 'log-level = "warn"',
             f"worker-count = {args.worker_count}", f"txn-batch = {args.txn_batch}"]
    if args.large_record_bytes is not None:
        lines.append(f"large-record-bytes = {args.large_record_bytes}")
    if server is not None:
        lines += ["[dest-db]", f'host = "{server.host}"', f"port = {server.port}",
                  f'user = "{server.user}"', f'password = "{server.password}"']
    return "\n".join(lines) + "\n"


def reset(server) -> None:
    conn = server.connect(autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {DB}")
    finally:
        conn.close()


def count(server) -> int:
    conn = server.connect(DB)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT COUNT(*) FROM sbtest")
            return cur.fetchone()[0]
    finally:
        conn.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=250_000, help="rows in the one transaction")
    p.add_argument("--dest", choices=("mysql", "print"), default="mysql")
    p.add_argument("--worker-count", type=int, default=4)
    p.add_argument("--txn-batch", type=int, default=100)
    p.add_argument("--large-record-bytes", type=int, default=None,
                   help="reparo.toml large-record-bytes (left out when not given)")
    p.add_argument("--code", default=None, help="run the child on this checkout")
    args = p.parse_args()
    base = Path(tempfile.mkdtemp(prefix="bench-reparo-"))
    server = None
    try:
        if args.dest == "mysql":
            from tidb_binlog.testing.mariadb import MariaDBServer

            server = MariaDBServer(base, name="reparo-down").start()
        small, large = base / "small", base / "large"
        write_dir(small, 1)
        size = write_dir(large, args.rows)
        results = []
        for d in (small, large):
            if server is not None:
                reset(server)
            toml = base / f"{d.name}.toml"
            toml.write_text(toml_text(d, args, server))
            results.append(run_child(toml, args.code))
            if server is not None:
                got = count(server)
                want = 1 if d is small else args.rows
                if got != want:
                    raise SystemExit(f"downstream holds {got} rows, expected {want}")
        (_, baseline), (seconds, peak) = results
        growth = peak - baseline
        print(f"RESULT reparo_large rows={args.rows} record_mb={size / 1e6:.1f} "
              f"dest={args.dest} seconds={seconds:.1f} peak_mb={peak:.0f} "
              f"baseline_mb={baseline:.0f} growth_mb={growth:.0f} "
              f"growth_x={growth * 1024 * 1024 / size:.2f} load={os.getloadavg()[0]:.1f}")
    finally:
        if server is not None:
            server.close()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
