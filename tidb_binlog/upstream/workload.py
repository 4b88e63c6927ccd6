"""Workloads that drive an :class:`~tidb_binlog.upstream.core.Upstream` from N sessions.

``run(upstream, kind, sessions=4, ops=..., duration_s=..., seed=1)`` creates the
tables it needs (through ``upstream.ddl``) and runs ``ops`` transactions in total
(or until ``duration_s`` passes), each session on its own thread with its own
``random.Random(seed + session_no)``. It returns :class:`WorkloadStats`.

=================  =================================================================
kind               one transaction
=================  =================================================================
``insert``         sysbench oltp_insert: one row into ``sbtest`` (id auto_increment
                   PK, k int, c char(120), pad char(60), index on k)
``update_index``   sysbench: ``k = k + 1`` on a random id
``delete``         sysbench: delete a random id, re-insert it
``mixed``          insert / update_index / update c / delete, random
``random_dml``     ``rnd`` table: PK updates (handle changes) and unique-key swaps
``all_types``      one row of every MySQL type family into ``all_types``
``no_pk``          ``nopk`` table without primary key, nullable unique key
``ddl``            DML on ``ddlt`` with an ADD/DROP COLUMN every 10th transaction
                   (session 0 only)
``large``          one transaction of ``rows_per_txn`` (default 100 000) rows, fed
                   by a generator in 1 000-row statements
=================  =================================================================

Errors the upstream marks ``retryable`` (a lock conflict: :class:`TxnConflict`; "information
schema is changed": :class:`SchemaChanged`; a pump outage during the Prewrite:
:class:`PumpUnavailable`), duplicate keys from the random choices and a column or
table a concurrent DDL just dropped are retried and counted in ``stats.retries``;
a DDL that could not be recorded but was undone (``DDLNotRecorded.undone``) is run
again the same way. Any other error stops the session and ``run`` raises it.
"""

from __future__ import annotations

import random
import string
import threading
import time
from dataclasses import dataclass, field

from tidb_binlog.errors import DDLNotRecorded, InvalidArgument, PumpUnavailable, UpstreamError
from tidb_binlog.upstream.txn import Raw

__all__ = ["WorkloadStats", "run", "retryable", "KINDS", "SBTEST_DDL", "ALL_TYPES_DDL"]

SBTEST_DDL = ("CREATE TABLE IF NOT EXISTS sbtest (id INT NOT NULL AUTO_INCREMENT PRIMARY KEY, "
              "k INT NOT NULL DEFAULT 0, c CHAR(120) NOT NULL DEFAULT '', "
              "pad CHAR(60) NOT NULL DEFAULT '', KEY k_1 (k))")
ALL_TYPES_DDL = (
    "CREATE TABLE IF NOT EXISTS all_types (id BIGINT PRIMARY KEY AUTO_INCREMENT, b BOOL, "
    "t TINYINT, tu TINYINT UNSIGNED, s SMALLINT, m MEDIUMINT, i INT, iu INT UNSIGNED, bi BIGINT, "
    "bu BIGINT UNSIGNED, f FLOAT, d DOUBLE, de DECIMAL(38,19), bt BIT(64), da DATE, "
    "dt DATETIME(6), ts TIMESTAMP NULL, tm TIME(3), y YEAR, c CHAR(10), vc VARCHAR(40), "
    "bn BINARY(4), bl BLOB, tx TEXT, e ENUM('a','b','c'), st SET('x','y','z'), j JSON)")
_TABLES = {
    "rnd": "CREATE TABLE IF NOT EXISTS rnd (id INT PRIMARY KEY, u INT, v VARCHAR(20), "
           "UNIQUE KEY uu (u))",
    "nopk": "CREATE TABLE IF NOT EXISTS nopk (a INT, u VARCHAR(16) NULL, v INT, "
            "UNIQUE KEY uu (u))",
    "ddlt": "CREATE TABLE IF NOT EXISTS ddlt (id INT PRIMARY KEY, v INT)",
}
KINDS = ("insert", "update_index", "delete", "mixed", "random_dml", "all_types", "no_pk", "ddl",
         "large")
_CJK = "中文日本語한국어漢字"

# MariaDB errors the workloads' own choices cause, retried besides ``retryable`` errors:
# a duplicate from the random keys, and a column or table that a concurrent DDL (the
# ``ddl`` workload's other session) just dropped or renamed.
RETRYABLE_CODES = (1062, 1054, 1146)
# Pause before retrying a pump outage, so a session does not spin on a pump that is down.
_UNAVAILABLE_PAUSE_S = 0.2


def retryable(exc: UpstreamError) -> bool:
    """Whether the workload runs the transaction (or DDL) ``exc`` ended again."""
    if isinstance(exc, DDLNotRecorded):
        return bool(exc.undone)
    return exc.retryable or exc.code in RETRYABLE_CODES


@dataclass
class WorkloadStats:
    txns: int = 0
    rows: int = 0
    retries: int = 0
    elapsed_s: float = 0.0
    errors: list[str] = field(default_factory=list)

    @property
    def txns_per_s(self) -> float:
        return self.txns / self.elapsed_s if self.elapsed_s else 0.0

    @property
    def rows_per_s(self) -> float:
        return self.rows / self.elapsed_s if self.elapsed_s else 0.0


def _sb_row(rng: random.Random) -> dict:
    return {"k": rng.randrange(1, 100_000), "c": "".join(rng.choices(string.digits, k=119)),
            "pad": "".join(rng.choices(string.digits, k=59))}


def _all_types_row(rng: random.Random) -> dict:
    return dict(b=rng.random() < 0.5, t=rng.choice([-128, 127, 0]), tu=rng.choice([0, 255]),
                s=rng.randrange(-32768, 32768), m=rng.randrange(-8388608, 8388608),
                i=rng.randrange(-2**31, 2**31), iu=rng.choice([0, 2**32 - 1]),
                bi=rng.choice([-2**63, 2**63 - 1, rng.randrange(-2**63, 2**63)]),
                bu=rng.choice([0, 2**64 - 1]), f=rng.choice([None, 1.5, -3.25]),
                d=rng.uniform(-1e300, 1e300), de=f"{rng.randrange(-10**19, 10**19)}.{rng.randrange(10**19):019d}",
                bt=rng.getrandbits(64).to_bytes(8, "big"),
                da=f"{rng.randrange(1000, 9999)}-{rng.randrange(1, 13):02d}-{rng.randrange(1, 29):02d}",
                dt=f"2023-05-06 07:08:09.{rng.randrange(10**6):06d}",
                ts=rng.choice([None, "2021-03-04 05:06:07"]), tm=f"-{rng.randrange(839)}:01:02.500",
                y=rng.randrange(1901, 2156), c="".join(rng.choices(_CJK, k=5)),
                vc=rng.choice([None, "".join(rng.choices(_CJK + "ab ", k=20))]),
                bn=rng.getrandbits(32).to_bytes(4, "big"), bl=rng.randbytes(rng.randrange(0, 64)),
                tx="".join(rng.choices(_CJK, k=30)), e=rng.choice([None, "a", "b", "c"]),
                st=rng.choice(["", "x", "x,z", "x,y,z"]),
                j=rng.choice(['{"a": [1, 2.5, "三"]}', "null", "[true, false]", '"s"']))


class _Runner:
    def __init__(self, up, kind: str, seed: int, rows_per_txn: int):
        self.up, self.kind, self.seed, self.rows_per_txn = up, kind, seed, rows_per_txn
        self.stats = WorkloadStats()
        self.lock = threading.Lock()
        self.next_id = 1_000_000

    def one(self, session, rng: random.Random, no: int, n: int) -> int:
        k = self.kind
        if k == "mixed":
            k = rng.choice(["insert", "update_index", "update_c", "delete"])
        with session.begin() as t:
            if k == "insert":
                return t.insert("sbtest", [_sb_row(rng)])
            if k == "update_index":
                return t.update("sbtest", {"k": Raw("k + 1")}, "id = %s", (rng.randrange(1, 1000),))
            if k == "update_c":
                return t.update("sbtest", {"c": _sb_row(rng)["c"]}, "id = %s",
                                (rng.randrange(1, 1000),))
            if k == "delete":
                i = rng.randrange(1, 1000)
                n_del = t.delete("sbtest", "id = %s", (i,))
                return n_del + (t.insert("sbtest", [{"id": i, **_sb_row(rng)}]) if n_del else 0)
            if k == "random_dml":
                a, b = rng.randrange(100), rng.randrange(100)
                if rng.random() < 0.3:
                    return t.replace("rnd", [{"id": a, "u": a, "v": str(n)}])
                if rng.random() < 0.5:  # PK update: the handle changes
                    return t.update("rnd", {"id": Raw("id + 1000")}, "id = %s", (a,))
                got = t.query("SELECT id, u FROM rnd WHERE id IN (%s, %s) FOR UPDATE", (a, b))
                if len(got) == 2 and a != b:  # unique-key swap through NULL
                    t.update("rnd", {"u": None}, "id = %s", (a,))
                    t.update("rnd", {"u": got[1][1] if got[0][0] == a else got[0][1]}, "id = %s",
                             (b,))
                    return 2 + t.update("rnd", {"u": got[0][1] if got[0][0] == a else got[1][1]},
                                        "id = %s", (a,))
                return t.insert("rnd", [{"id": 5000 + n * 8 + no, "u": None, "v": "x"}])
            if k == "all_types":
                return t.insert("all_types", [_all_types_row(rng)])
            if k == "no_pk":
                u = rng.choice([None, str(rng.randrange(50))])
                if u is not None and rng.random() < 0.5:
                    return t.update("nopk", {"v": Raw("COALESCE(v, 0) + 1")}, "u = %s", (u,))
                if rng.random() < 0.2:
                    return t.delete("nopk", "a = %s LIMIT 1", (rng.randrange(100),))
                return t.insert("nopk", [{"a": rng.randrange(100), "u": None, "v": n}])
            if k == "ddl":
                if no == 0 and n % 10 == 9:
                    t.rollback()
                    col = f"c{n}"
                    # A retry of this op (after a DDL failed retryably) skips what is done.
                    if self.up.table("ddlt", session.database).column_by_name(col) is None:
                        self.up.ddl(f"ALTER TABLE ddlt ADD COLUMN {col} INT DEFAULT {n}",
                                    session.database)
                    if n % 20 == 19 and self.up.table("ddlt", session.database).column_by_name(
                            col) is not None:
                        self.up.ddl(f"ALTER TABLE ddlt DROP COLUMN {col}", session.database)
                    return 0
                return t.replace("ddlt", [{"id": rng.randrange(200), "v": n}])
            if k == "large":
                return t.insert("sbtest", (_sb_row(rng) for _ in range(self.rows_per_txn)))
        raise InvalidArgument(f"unknown workload kind {k!r}")


def run(upstream, kind: str, *, sessions: int = 4, ops: int | None = 1000,
        duration_s: float | None = None, seed: int = 1, rows_per_txn: int = 100_000,
        database: str | None = None) -> WorkloadStats:
    """Run ``kind`` (see the module docstring) and return its stats."""
    if kind not in KINDS:
        raise InvalidArgument(f"unknown workload {kind!r}; choose one of {KINDS}")
    if kind == "large":
        sessions = 1
    ddl = {"all_types": ALL_TYPES_DDL, "random_dml": _TABLES["rnd"], "no_pk": _TABLES["nopk"],
           "ddl": _TABLES["ddlt"]}.get(kind, SBTEST_DDL)
    upstream.ddl(ddl, database)
    r = _Runner(upstream, kind, seed, rows_per_txn)
    remaining = [ops if ops is not None else 1 << 62]
    deadline = time.monotonic() + duration_s if duration_s else None

    def work(no: int):
        rng = random.Random(seed * 1000 + no)
        with upstream.session(database) as s:
            while True:
                with r.lock:
                    if remaining[0] <= 0 or (deadline and time.monotonic() >= deadline):
                        return
                    remaining[0] -= 1
                    n = r.stats.txns + r.stats.retries
                for _attempt in range(20):
                    try:
                        rows = r.one(s, rng, no, n)
                        break
                    except UpstreamError as exc:
                        again = retryable(exc)
                        with r.lock:
                            if not again:
                                r.stats.errors.append(f"{type(exc).__name__}: {exc}")
                                return
                            r.stats.retries += 1
                        if isinstance(exc, PumpUnavailable):
                            time.sleep(_UNAVAILABLE_PAUSE_S)
                else:
                    continue
                with r.lock:
                    r.stats.txns += 1
                    r.stats.rows += rows

    start = time.monotonic()
    threads = [threading.Thread(target=work, args=(i,), name=f"workload-{i}")
               for i in range(sessions)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    r.stats.elapsed_s = time.monotonic() - start
    upstream.flush()
    if r.stats.errors:
        raise UpstreamError(f"workload {kind} failed: {r.stats.errors[0]}")
    return r.stats
