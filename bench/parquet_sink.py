"""Throughput of the Parquet sink's lake against a plain pyarrow writer of the same rows.

The sink side is :class:`ParquetLake` fed the keeper's output (``Changes`` of 1-row
insert transactions, values as the translator's SQL arguments: decimals and times as
text), flushing every ``--flush-rows`` rows (the default policy: 100 000), with the
manifest commit, fsyncs and zstd, into a temporary directory. The ceiling is a plain
pyarrow writer given the same rows as Python dicts with their final values
(``Decimal``, ``datetime``) and the same schema: ``RecordBatch.from_pylist`` +
``pq.write_table`` (zstd), no parsing, no fsync, no manifest.

    RESULT parquet_sink_<shape> rows/s=<sink> ceiling=<plain> ratio=<sink/plain>
        (per CPU-second; ceiling: plain pyarrow writer of the same rows) wall rows/s=...

Shapes: ``sysbench`` (``id INT, k INT, c CHAR(120), pad CHAR(60)``) and ``typed``
(``id BIGINT, de DECIMAL(20,6), dt DATETIME(6), tm TIME(3), s VARCHAR(40), j JSON``).
Figures are rows per CPU-second of this process (comparable on a busy machine; the
sink's fsyncs wait without CPU), then wall-clock rows/s.

Usage: ``python bench/parquet_sink.py [--rows 200000] [--flush-rows 100000]``.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from tidb_binlog.drainer.sinks.parquet.arrow import (
    ColumnSpec,
    TableSpec,
    change_schema,
    converter,
)
from tidb_binlog.drainer.sinks.parquet.keeper import Changes
from tidb_binlog.drainer.sinks.parquet.sink import ParquetLake
from tidb_binlog.model.consts import TypeCode as T

TS0 = 1_764_000_000_000 << 18

SHAPES = {
    "sysbench": TableSpec("bench", "sbtest", (
        ColumnSpec("id", T.LONG), ColumnSpec("k", T.LONG),
        ColumnSpec("c", T.STRING, charset="utf8mb4"),
        ColumnSpec("pad", T.STRING, charset="utf8mb4"))),
    "typed": TableSpec("bench", "typed", (
        ColumnSpec("id", T.LONGLONG), ColumnSpec("de", T.NEWDECIMAL, flen=20, decimal=6),
        ColumnSpec("dt", T.DATETIME, decimal=6), ColumnSpec("tm", T.DURATION, decimal=3),
        ColumnSpec("s", T.VARCHAR, charset="utf8mb4"), ColumnSpec("j", T.JSON))),
}


def make_rows(shape: str, n: int) -> list[dict]:
    rng = random.Random(7)
    if shape == "sysbench":
        return [{"id": i, "k": rng.randrange(1 << 20), "c": f"{rng.randrange(10**18):0120d}",
                 "pad": f"{rng.randrange(10**18):060d}"} for i in range(n)]
    return [{"id": i, "de": f"{rng.randrange(-10**13, 10**13)}.{rng.randrange(10**6):06d}",
             "dt": f"2026-11-25 12:34:56.{rng.randrange(10**6):06d}",
             "tm": f"{rng.randrange(839)}:01:02.500", "s": f"name-{rng.randrange(10**9)}",
             "j": '{"a": [1, 2.5, "x"]}'} for i in range(n)]


def run_sink(spec: TableSpec, rows: list[dict], flush_rows: int) -> tuple[float, float]:
    items = [(TS0 + i + 1, Changes(rows=((spec, "insert", None, r),)), 1)
             for i, r in enumerate(rows)]
    with tempfile.TemporaryDirectory() as d:
        lake = ParquetLake(Path(d) / "lake", flush_rows=flush_rows, flush_interval_s=1e9)
        lake.reset()
        t0, c0 = time.perf_counter(), time.process_time()
        for start in range(0, len(items), 512):  # the merger's batch size
            lake.apply(items[start:start + 512])
        lake.close()
        return len(rows) / (time.perf_counter() - t0), len(rows) / (time.process_time() - c0)


def run_plain(spec: TableSpec, rows: list[dict], flush_rows: int) -> tuple[float, float]:
    convs = [(c.name, converter(c)) for c in spec.columns]
    typed = [{name: (conv(r[name]) if conv else r[name]) for name, conv in convs} for r in rows]
    schema = change_schema(spec)
    with tempfile.TemporaryDirectory() as d:
        t0, c0 = time.perf_counter(), time.process_time()
        for n, start in enumerate(range(0, len(typed), flush_rows)):
            part = typed[start:start + flush_rows]
            batch = pa.RecordBatch.from_pylist(
                [{"commit_ts": TS0 + start + i + 1, "op": "insert", "before": None, "after": r}
                 for i, r in enumerate(part)], schema=schema)
            pq.write_table(pa.Table.from_batches([batch]), f"{d}/part-{n}.parquet",
                           compression="zstd")
        return len(rows) / (time.perf_counter() - t0), len(rows) / (time.process_time() - c0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=200_000, help="rows per shape")
    ap.add_argument("--flush-rows", type=int, default=100_000, help="the sink's flush-rows")
    ap.add_argument("--shapes", default="sysbench,typed", help="comma list of shapes")
    args = ap.parse_args()
    for shape in args.shapes.split(","):
        spec = SHAPES[shape]
        rows = make_rows(shape, args.rows)
        sink, sink_cpu = run_sink(spec, rows, args.flush_rows)
        plain, plain_cpu = run_plain(spec, rows, args.flush_rows)
        print(f"RESULT parquet_sink_{shape} rows/s={sink_cpu:.0f} ceiling={plain_cpu:.0f} "
              f"ratio={sink_cpu / plain_cpu:.2f} (per CPU-second; ceiling: plain pyarrow "
              f"writer of the same rows) wall rows/s={sink:.0f} ceiling={plain:.0f}",
              flush=True)


if __name__ == "__main__":
    main()
