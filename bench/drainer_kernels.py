"""Micro-benchmarks of the drainer's pure kernels, single process, per CPU-second.

Each figure is operations per CPU-second of this process (``time.process_time``),
so it is per core even on a shared machine.  Sysbench-shaped rows
(``id INT PK, k INT, c CHAR(120), pad CHAR(60)``) feed the row kernels.

    RESULT drainer_merge_heap value=<items/s>     4 sources, batches of 256
    RESULT drainer_merge_linear value=<items/s>
    RESULT drainer_causality value=<rows/s>       row_keys + Causality.assign
    RESULT drainer_routing value=<rows/s>         row_keys + Router.route_keys
    RESULT drainer_sql_render value=<rows/s>      dml_statements (UPDATE)
    RESULT drainer_merge_by_key value=<rows/s>    merge_by_key + render_merged, 1000 rows/stmt
    RESULT drainer_checkpoint value=<items/s>     Advancer register + ack

The per-row figures are the kernel's own cost; the drainer's ceiling is the
downstream (bench/drainer.py compares against a multi-row INSERT client).

Usage: ``python bench/drainer_kernels.py [--rows N]``.
"""

from __future__ import annotations

import argparse
import random
import time

from tidb_binlog.drainer.causality import CONFLICT, Causality, row_keys
from tidb_binlog.drainer.checkpoint import Advancer, Checkpoint
from tidb_binlog.drainer.dml import DML, DMLType, TableSchema
from tidb_binlog.drainer.merge import STRATEGIES, Merger
from tidb_binlog.drainer.merge_by_key import merge_by_key, render_merged
from tidb_binlog.drainer.routing import Router
from tidb_binlog.drainer.sql import dml_statements

SBTEST = TableSchema.build("sbtest", "sbtest1", ["id", "k", "c", "pad"], ["id"])


def _rows(n: int, seed: int = 1) -> list[DML]:
    rnd = random.Random(seed)
    out = []
    for _ in range(n):
        pk = rnd.randrange(n * 4)
        old = {"id": pk, "k": rnd.randrange(10**6), "c": "x" * 120, "pad": "y" * 60}
        new = {**old, "k": old["k"] + 1}
        out.append(DML("sbtest", "sbtest1", DMLType.UPDATE, new, old, SBTEST))
    return out


def _timed(fn) -> float:
    start = time.process_time()
    count = fn()
    return count / max(time.process_time() - start, 1e-9)


def bench_merge(strategy: str, n: int) -> float:
    sources = 4
    streams = [list(range(s + 1, n * sources + 1, sources)) for s in range(sources)]

    def run() -> int:
        m = Merger(0, strategy)
        for s in range(sources):
            m.add_source(f"pump{s}")
        emitted = 0
        for i in range(0, n, 256):
            for s in range(sources):
                batch = streams[s][i:i + 256]
                m.push(f"pump{s}", [(t, None) for t in batch], batch[-1] if batch else None)
            emitted += len(m.pop_ready())
        return emitted

    return _timed(run)


def bench_causality(dmls: list[DML]) -> float:
    def run() -> int:
        c = Causality(16)
        for dml in dmls:
            keys = row_keys(dml)
            if c.assign(keys) is CONFLICT or len(c) > 4096:  # the shell flushes here
                c.reset()
                c.assign(keys)
        return len(dmls)

    return _timed(run)


def bench_routing(dmls: list[DML]) -> float:
    def run() -> int:
        r = Router(16)
        for dml in dmls:
            keys = row_keys(dml)
            if r.route_keys(keys) is CONFLICT or len(r) > 4096:
                r.flushed()
                r.route_keys(keys)
        return len(dmls)

    return _timed(run)


def bench_sql(dmls: list[DML]) -> float:
    def run() -> int:
        for dml in dmls:
            dml_statements(dml)
        return len(dmls)

    return _timed(run)


def bench_merge_by_key(dmls: list[DML]) -> float:
    def run() -> int:
        for i in range(0, len(dmls), 5000):
            render_merged(merge_by_key(dmls[i:i + 5000]), batch_size=1000)
        return len(dmls)

    return _timed(run)


def bench_checkpoint(n: int) -> float:
    def run() -> int:
        a = Advancer(Checkpoint(0))
        window = []
        for ts in range(1, n + 1):
            a.register(ts)
            window.append(ts)
            if len(window) == 64:
                for t in reversed(window):
                    a.ack(t)
                window.clear()
        return n

    return _timed(run)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    args = parser.parse_args(argv)
    dmls = _rows(args.rows)
    results = [(f"drainer_merge_{s}", bench_merge(s, args.rows // 4), "items/s")
               for s in STRATEGIES]
    results += [("drainer_causality", bench_causality(dmls), "rows/s"),
                ("drainer_routing", bench_routing(dmls), "rows/s"),
                ("drainer_sql_render", bench_sql(dmls), "rows/s"),
                ("drainer_merge_by_key", bench_merge_by_key(dmls), "rows/s"),
                ("drainer_checkpoint", bench_checkpoint(args.rows), "items/s")]
    for name, value, unit in results:
        print(f"RESULT {name} value={value:.0f} unit={unit}")


if __name__ == "__main__":
    main()
