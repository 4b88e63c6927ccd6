"""Micro-benchmarks of the drainer's pure kernels, single process, per CPU-second.

Each figure is operations per CPU-second of this process (``time.process_time``),
so it is per core even on a shared machine.  Sysbench-shaped rows
(``id INT PK, k INT, c CHAR(120), pad CHAR(60)``) feed the row kernels.

    RESULT drainer_merge_heap value=<items/s>     2 sources, batches of 2000 pushed, popped
    RESULT drainer_merge_linear value=<items/s>   2048 at a time (pop_ready; runs:
    RESULT drainer_merge_runs value=<items/s>     pop_ready_pairs, what the actor calls)
    RESULT drainer_causality value=<rows/s>       row_keys + Causality.assign
    RESULT drainer_routing value=<rows/s>         row_keys + Router.route_keys
    RESULT drainer_sql_render value=<rows/s>      dml_statements (UPDATE)
    RESULT drainer_merge_by_key value=<rows/s>    merge_by_key + render_merged, 1000 rows/stmt
    RESULT drainer_checkpoint value=<items/s>     Advancer register + ack
    RESULT drainer_decode_row value=<rows/s> python=<rows/s> ratio=<c/python>
                                                  an insert row to SQL arguments
                                                  (row_args' old-format decoder): the
                                                  compiled one and the Python reference
    RESULT drainer_keeper_insert value=<rows/s>   the keeper's work per merged batch of
    RESULT drainer_keeper_update value=<rows/s>   1-row txns: decode + translate +
                                                  BatchPlanner.plan + pack (the Ray hop);
                                                  decoder=c|python says which decoded
    RESULT drainer_worker_unpickle value=<rows/s> a worker loading its routed payload
    RESULT drainer_hop_ray value=<rows/s>         Ray's own serialisation of a routed
    RESULT drainer_hop_packed value=<rows/s>      batch vs tidb_binlog.packed (one pickle),
                                                  both ways (starts a local Ray)

The per-row figures are the kernel's own cost; the drainer's ceiling is the
downstream (bench/drainer.py compares against a multi-row INSERT client).

Usage: ``python bench/drainer_kernels.py [--rows N]``.
"""

from __future__ import annotations

import argparse
import random
import time

from tidb_binlog.drainer.apply.causality import CONFLICT, Causality, row_keys
from tidb_binlog.drainer.apply.dml import DML, DMLType, TableSchema
from tidb_binlog.drainer.apply.merge_by_key import merge_by_key, render_merged
from tidb_binlog.drainer.apply.routing import Router
from tidb_binlog.drainer.apply.sql import dml_statements
from tidb_binlog.drainer.checkpoint.checkpoint import Advancer, Checkpoint
from tidb_binlog.drainer.source.merge import STRATEGIES, Merger

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


def bench_merge(strategy: str, n: int, sources: int = 2, batch: int = 2000,
                limit: int = 2048) -> float:
    """The merger actor's loop: each pump's pulled batch (``n`` items per pump, TSO-sized
    commit_ts interleaved across pumps) pushed whole, then ``limit``-item batches popped
    until what is left must wait; ``runs`` pops the pairs as the actor does."""
    base = 446_000_000_000_000_000
    streams = [[(base + s + 1 + i * sources, b"") for i in range(n)] for s in range(sources)]
    names = [f"pump{s}" for s in range(sources)]

    def run() -> int:
        m = Merger(0, strategy)
        for name in names:
            m.add_source(name)
        pop = m.pop_ready_pairs if strategy == "runs" else m.pop_ready
        emitted = 0
        for i in range(0, n, batch):
            for name, stream in zip(names, streams, strict=True):
                items = stream[i:i + batch]
                m.push(name, items, items[-1][0] if items else None)
            while True:
                got = len(pop(limit))
                emitted += got
                if got < limit:
                    break
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


def _sbtest_translator():
    """A Translator holding sysbench's table (id INT PK handle, k INT, c CHAR(120),
    pad CHAR(60)) at schema version 2."""
    from tidb_binlog.codec import mysql as m
    from tidb_binlog.drainer.translate.schema import SchemaKeeper
    from tidb_binlog.drainer.translate.txn import Translator
    from tidb_binlog.model import (
        ActionType,
        CIStr,
        ColumnInfo,
        DBInfo,
        FieldType,
        HistoryInfo,
        Job,
        JobState,
        TableInfo,
    )

    def col(cid, name, tp, flag, flen, charset):
        return ColumnInfo(id=cid, name=CIStr(name), offset=cid - 1,
                          type=FieldType(tp=tp, flag=flag, flen=flen, decimal=0,
                                         charset=charset, collate="utf8mb4_bin"))

    nn = m.NOT_NULL_FLAG
    cols = [col(1, "id", m.TYPE_LONG, m.PRI_KEY_FLAG | nn, 11, "binary"),
            col(2, "k", m.TYPE_LONG, nn, 11, "binary"),
            col(3, "c", m.TYPE_STRING, nn, 120, "utf8mb4"),
            col(4, "pad", m.TYPE_STRING, nn, 60, "utf8mb4")]
    table = TableInfo(id=10, name=CIStr("sbtest1"), cols=cols, pk_is_handle=True, max_col_id=4)
    db = DBInfo(id=2, db_name=CIStr("sbtest"))
    jobs = [Job(id=1, type=ActionType.CREATE_SCHEMA, schema_id=2, table_id=0,
                state=JobState.SYNCED, binlog=HistoryInfo(schema_version=1, db_info=db)),
            Job(id=2, type=ActionType.CREATE_TABLE, schema_id=2, table_id=10,
                state=JobState.SYNCED, binlog=HistoryInfo(schema_version=2, table_info=table))]
    return Translator(SchemaKeeper.from_history(jobs, 2), {j.id: j for j in jobs}.get)


def _sbtest_values(rnd: random.Random) -> tuple[int, int, str, str]:
    """One sysbench row's ``(id, k, c, pad)``: random keys, c of 119 and pad of 59 chars."""
    pk, k = rnd.randrange(10**6), rnd.randrange(10**6)
    c = "".join(rnd.choice("0123456789-") for _ in range(119))
    pad = "".join(rnd.choice("0123456789-") for _ in range(59))
    return pk, k, c, pad


def _sbtest_payloads(n: int, update: bool) -> list[tuple[int, bytes]]:
    """``n`` served Commit binlogs of 1-row sysbench txns, as the merger hands them on."""
    from tidb_binlog import binlog as bl
    from tidb_binlog.codec import Datum, encode_old_row, encode_value

    rnd = random.Random(2)
    out = []
    for i in range(n):
        pk, k, c, pad = _sbtest_values(rnd)
        row = encode_old_row([1, 2, 3, 4], [Datum.int64(pk), Datum.int64(k), Datum.string(c),
                                            Datum.string(pad)])
        if update:
            new = encode_old_row([1, 2, 3, 4], [Datum.int64(pk), Datum.int64(k + 1),
                                                Datum.string(c), Datum.string(pad)])
            mut = bl.new_table_mutation(10, updated_rows=[row + new],
                                        sequence=[bl.MutationType.UPDATE])
        else:
            mut = bl.new_table_mutation(10, inserted_rows=[encode_value([Datum.int64(pk)]) + row],
                                        sequence=[bl.MutationType.INSERT])
        commit_ts = (i + 1) << 18
        b = bl.commit(commit_ts - 1, commit_ts)
        b.prewrite_value = bl.encode(bl.new_prewrite_value(2, [mut]))
        out.append((commit_ts, bl.encode(b)))
    return out


def bench_decode_row(n: int) -> tuple[float, str]:
    """``row_args._decode_old_args`` alone on ``n`` sysbench insert rows (from just after
    the int handle, as ``decode_int_handle_args`` calls it), the compiled decoder and the
    Python reference in the same run: ``(compiled rows/s, "python=... ratio=...")``; the
    reference's figure twice when the module is not built (or TIDB_BINLOG_PURE_PYTHON)."""
    import datetime

    from tidb_binlog.codec import Datum, encode_old_row, encode_value, row_args
    from tidb_binlog.codec import mysql as m

    nn = m.NOT_NULL_FLAG
    plan = row_args.ArgPlan({1: m.FieldType(m.TYPE_LONG, flag=m.PRI_KEY_FLAG | nn, flen=11),
                             2: m.FieldType(m.TYPE_LONG, flag=nn, flen=11),
                             3: m.FieldType(m.TYPE_STRING, flag=nn, flen=120, charset="utf8mb4"),
                             4: m.FieldType(m.TYPE_STRING, flag=nn, flen=60, charset="utf8mb4")})
    rnd = random.Random(3)
    rows = []
    for _ in range(n):
        pk, k, c, pad = _sbtest_values(rnd)
        handle = encode_value([Datum.int64(pk)])
        rows.append((handle + encode_old_row([1, 2, 3, 4], [
            Datum.int64(pk), Datum.int64(k), Datum.string(c), Datum.string(pad)]), len(handle)))
    utc = datetime.UTC

    def rate(decode) -> float:
        def run() -> int:
            for buf, off in rows:
                decode(buf, off, plan, utc, False)
            return n

        return _timed(run)

    python = rate(row_args._decode_old_args_py)
    fast = rate(row_args._rowfast.decode_old_args) if row_args.COMPILED else python
    return fast, f"python={python:.0f} ratio={fast / python:.2f}"


def _decoder() -> str:
    from tidb_binlog.codec import row_args

    return "decoder=c" if row_args.COMPILED else "decoder=python"


def bench_keeper(n: int, update: bool, workers: int = 4, batch: int = 512
                 ) -> tuple[float, str]:
    """The keeper actor's CPU per merged batch: decode, translate, route, pickle."""
    import pickle

    from tidb_binlog import binlog as bl
    from tidb_binlog.drainer.apply.routing import BatchPlanner

    tr = _sbtest_translator()
    items = _sbtest_payloads(n, update)

    def run() -> int:
        for i in range(0, n, batch):
            translated = [(ts, tr.translate(bl.decode(payload)), 2)
                          for ts, payload in items[i:i + batch]]
            summary, payloads = BatchPlanner(workers).plan(translated)
            pickle.dumps(summary, 5)
            for payload in payloads:
                pickle.dumps(payload, 5)
        return n

    return _timed(run), _decoder()


def bench_worker_unpickle(n: int, workers: int = 4, batch: int = 512) -> float:
    import pickle

    from tidb_binlog import binlog as bl
    from tidb_binlog.drainer.apply.routing import BatchPlanner

    tr = _sbtest_translator()
    items = _sbtest_payloads(n, False)
    blobs = []
    for i in range(0, n, batch):
        translated = [(ts, tr.translate(bl.decode(p)), 2) for ts, p in items[i:i + batch]]
        blobs += [pickle.dumps(p, 5) for p in BatchPlanner(workers).plan(translated)[1]]

    def run() -> int:
        for blob in blobs:
            pickle.loads(blob)
        return n

    return _timed(run)


def bench_hop(n: int, packed: bool, workers: int = 4, batch: int = 1024) -> float:
    """One merged batch through the object store (``ray.put`` + ``ray.get``, in this
    process): items to the keeper, the summary and each worker's payload out of it; as
    Ray serialises the lists, or packed."""
    import ray

    from tidb_binlog import binlog as bl
    from tidb_binlog.drainer.apply.routing import BatchPlanner
    from tidb_binlog.packed import pack, unpack

    if not ray.is_initialized():
        ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    tr = _sbtest_translator()
    items = _sbtest_payloads(batch, False)
    summary, payloads = BatchPlanner(workers).plan(
        [(ts, tr.translate(bl.decode(p)), 2) for ts, p in items])
    objects = [items, summary, *payloads]

    def run() -> int:
        for _ in range(n // batch):
            for obj in objects:
                if packed:
                    unpack(ray.get(ray.put(pack(obj))))
                else:
                    ray.get(ray.put(obj))
        return (n // batch) * batch

    return _timed(run)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--only", default="", help="comma-separated result names (prefixes)")
    args = parser.parse_args(argv)
    dmls = _rows(args.rows)
    n = args.rows
    benches = [(f"drainer_merge_{s}", lambda s=s: bench_merge(s, n // 2), "items/s")
               for s in STRATEGIES]
    benches += [("drainer_causality", lambda: bench_causality(dmls), "rows/s"),
                ("drainer_routing", lambda: bench_routing(dmls), "rows/s"),
                ("drainer_sql_render", lambda: bench_sql(dmls), "rows/s"),
                ("drainer_merge_by_key", lambda: bench_merge_by_key(dmls), "rows/s"),
                ("drainer_checkpoint", lambda: bench_checkpoint(n), "items/s"),
                ("drainer_decode_row", lambda: bench_decode_row(n), "rows/s"),
                ("drainer_keeper_insert", lambda: bench_keeper(n // 5, False), "rows/s"),
                ("drainer_keeper_update", lambda: bench_keeper(n // 5, True), "rows/s"),
                ("drainer_worker_unpickle", lambda: bench_worker_unpickle(n // 5), "rows/s"),
                ("drainer_hop_ray", lambda: bench_hop(n // 5, False), "rows/s"),
                ("drainer_hop_packed", lambda: bench_hop(n // 5, True), "rows/s")]
    only = [x for x in args.only.split(",") if x]
    for name, fn, unit in benches:
        if not only or any(name.startswith(o) for o in only):
            got = fn()
            value, extra = got if isinstance(got, tuple) else (got, "")
            print(f"RESULT {name} value={value:.0f} unit={unit} {extra}".rstrip(), flush=True)


if __name__ == "__main__":
    main()
