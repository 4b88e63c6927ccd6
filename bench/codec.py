"""Decode sysbench-shaped rows with the codec, single process, and print rows/s per core.

A sysbench ``sbtest`` row is ``id INT PRIMARY KEY`` (the int handle), ``k INT``,
``c CHAR(120)``, ``pad CHAR(60)``. Two shapes are decoded with column types:

- old format (what binlog carries): ``EncodeValue(handle) ‖ EncodeOldRow(k, c, pad)``
  through ``decode_insert_row`` (handle prefix + typed row);
- row format v2 (``k, c, pad``; the handle lives in the key) through ``decode_row_v2``.

Figures are rows per CPU-second of this process (``time.process_time``), so they
are per core even on a shared machine. The two required figures are printed last:

    RESULT codec_decode_old_row value=<v> unit=rows/s
    RESULT codec_decode_v2 value=<v> unit=rows/s

Usage: ``python bench/codec.py [--rows N] [--seconds S]``.
"""

from __future__ import annotations

import argparse
import random
import time

from tidb_binlog.codec import (
    Datum,
    FieldType,
    decode_insert_row,
    decode_old_row,
    decode_row_v2,
    encode_old_row,
    encode_row_v2,
    encode_value,
    format_sql_arg,
    split_insert_row,
)
from tidb_binlog.codec import mysql as m

TYPES = {
    1: FieldType(m.TYPE_LONG, flag=m.PRI_KEY_FLAG | m.NOT_NULL_FLAG, flen=11),
    2: FieldType(m.TYPE_LONG, flag=m.NOT_NULL_FLAG, flen=11),
    3: FieldType(m.TYPE_STRING, flag=m.NOT_NULL_FLAG, flen=120, charset="utf8mb4"),
    4: FieldType(m.TYPE_STRING, flag=m.NOT_NULL_FLAG, flen=60, charset="utf8mb4"),
}
ROW_TYPES = {cid: TYPES[cid] for cid in (2, 3, 4)}


def _digits(rng: random.Random, groups: int) -> str:
    return "-".join("".join(rng.choices("0123456789", k=11)) for _ in range(groups))


def make_rows(n: int, seed: int = 1) -> tuple[list[bytes], list[bytes]]:
    rng = random.Random(seed)
    old, v2 = [], []
    for i in range(1, n + 1):
        k = rng.randint(1, 10_000_000)
        datums = [Datum.int64(k), Datum.string(_digits(rng, 10)), Datum.string(_digits(rng, 5))]
        old.append(encode_value([Datum.int64(i)]) + encode_old_row([2, 3, 4], datums))
        v2.append(encode_row_v2([2, 3, 4], datums))
    return old, v2


def rate(fn, rows: list[bytes], seconds: float) -> float:
    """Rows per CPU-second of ``fn`` over ``rows``, repeated for about ``seconds``."""
    done = 0
    start = time.process_time()
    deadline = start + seconds
    while True:
        for row in rows:
            fn(row)
        done += len(rows)
        now = time.process_time()
        if now >= deadline:
            return done / (now - start)


def _old_typed(row: bytes):
    return decode_insert_row(row, ROW_TYPES)


def _old_raw(row: bytes):
    _, rest = split_insert_row(row)
    return decode_old_row(rest)


def _old_to_args(row: bytes):
    _, cols = decode_insert_row(row, ROW_TYPES)
    return [format_sql_arg(d, ROW_TYPES[cid]) for cid, d in cols.items()]


def _v2_typed(row: bytes):
    return decode_row_v2(row, ROW_TYPES)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2000, help="distinct rows to cycle over")
    parser.add_argument("--seconds", type=float, default=1.0, help="CPU seconds per figure")
    args = parser.parse_args(argv)
    old, v2 = make_rows(args.rows)
    sample = decode_insert_row(old[0], ROW_TYPES)
    assert sample[1][3].kind is Datum.string("").kind, sample
    print(f"# {args.rows} sysbench rows: old {len(old[0])} bytes/row, v2 {len(v2[0])} bytes/row")
    extra = {
        "codec_decode_old_row_untyped": rate(_old_raw, old, args.seconds),
        "codec_decode_old_row_to_sql_args": rate(_old_to_args, old, args.seconds),
    }
    main_figures = {
        "codec_decode_old_row": rate(_old_typed, old, args.seconds),
        "codec_decode_v2": rate(_v2_typed, v2, args.seconds),
    }
    for name, value in {**extra, **main_figures}.items():
        print(f"RESULT {name} value={value:.0f} unit=rows/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
