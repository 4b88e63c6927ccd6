"""Sessions and transactions that write binlogs exactly as TiDB's 2PC does.

``txn = session.begin()`` takes ``start_ts`` from the TSO. DML methods change rows
in MariaDB *and* capture exact row images inside the transaction:

- ``insert(table, rows)``: ``INSERT ... RETURNING`` gives the rows as stored
  (auto-increment values, defaults, coercions) → Insert mutations;
- ``update(table, set_values, where_sql, args)``: ``SELECT ... FOR UPDATE`` with the
  WHERE locks and reads the old rows; the UPDATE is then applied by handle and the
  new rows read back by handle → Update mutations. A row whose handle changes (its
  int or clustered primary key is updated) becomes DeleteRow + Insert, as TiDB's
  ``updateRecord`` does; an unchanged row writes nothing;
- ``delete(table, where_sql, args)``: ``DELETE ... RETURNING`` → DeleteRow;
- ``replace(table, rows)``: conflicting rows (by any unique key) are locked and
  deleted, then the row inserted, as TiDB's REPLACE (an identical row is a no-op);
- ``execute(sql, args)``: the same for a plain INSERT/REPLACE/UPDATE/DELETE text.

Multi-step operations run under a SAVEPOINT so a failed statement leaves neither
rows nor mutations behind (TiDB's statement atomicity).

The first change of a transaction carries, in the same round trip, the
*prologue*: one ``INSERT ... SELECT`` that writes the txn-status row
``(start_ts, 0)`` (its row lock marks the transaction running) only if the
catalog's schema version is still the session's snapshot version, and takes a
shared lock on that version row, so no DDL catalog round can commit until we do
(a moved version costs one extra round trip that reads it). ``commit()`` then
follows TiDB's order: the schema check (a DDL that changed a touched table
aborts the commit, like TiDB's; identity checks when the version did not move);
the Prewrite binlog (``PrewriteValue{schema_version, mutations}``,
``prewrite_key`` = the record key of the first changed row) written
synchronously; ``commit_ts`` from the TSO *while the row locks are held*;
status-row update + COMMIT in one round trip; the Commit binlog queued for the
background sender. Any failure after the Prewrite sends a Rollback binlog.
So a one-statement transaction costs two MariaDB round trips, as the same
statement + COMMIT does without binlog.
A transaction without row changes writes no binlog.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

import pymysql

from tidb_binlog import binlog as bl
from tidb_binlog.errors import SchemaError, UpstreamError
from tidb_binlog.model import HANDLE_ROWID, TableInfo
from tidb_binlog.upstream.catalog import CATALOG_DB, META_SCHEMA_VERSION
from tidb_binlog.upstream.core import connect, translate
from tidb_binlog.upstream.faults import SimulatedCrash
from tidb_binlog.upstream.rows import TableCodec, quote_id

__all__ = ["Session", "Txn", "Raw"]

_BATCH_ROWS = 1000
# The transaction prologue, sent in the round trip of its first change (see Txn._exec).
_PROLOGUE_SQL = (f"INSERT INTO {CATALOG_DB}.txn_status (start_ts, commit_ts) SELECT %d, 0 FROM "
                 f"{CATALOG_DB}.meta WHERE name='{META_SCHEMA_VERSION}' AND value=%d "
                 "LOCK IN SHARE MODE; ")
_STATUS_ROW_SQL = f"INSERT INTO {CATALOG_DB}.txn_status VALUES (%d, 0); "
_DROP_STATUS_SQL = f"DELETE FROM {CATALOG_DB}.txn_status WHERE start_ts=%d; "
_VERSION_SQL = (f"SELECT value FROM {CATALOG_DB}.meta WHERE name='{META_SCHEMA_VERSION}' "
                "LOCK IN SHARE MODE; ")
_INSERT, _UPDATE, _DELETE = bl.MutationType.INSERT, bl.MutationType.UPDATE, bl.MutationType.DELETE_ROW


class Raw(str):
    """A SQL expression used verbatim as an UPDATE value, e.g. ``Raw("k + 1")``."""


class _Mutation:
    __slots__ = ("table_id", "inserted", "updated", "deleted", "sequence")

    def __init__(self, table_id: int):
        self.table_id = table_id
        self.inserted: list[bytes] = []
        self.updated: list[bytes] = []
        self.deleted: list[bytes] = []
        self.sequence: list[int] = []

    def mark(self) -> tuple[int, int, int, int]:
        return len(self.inserted), len(self.updated), len(self.deleted), len(self.sequence)

    def reset(self, mark) -> None:
        i, u, d, s = mark
        del self.inserted[i:], self.updated[u:], self.deleted[d:], self.sequence[s:]


class Session:
    """One MariaDB connection; runs one transaction at a time."""

    def __init__(self, upstream, database: str | None):
        self.upstream = upstream
        self.database = database
        self.conn = connect(upstream.params, database=database, multi_statements=True)
        self.txn: Txn | None = None

    def begin(self) -> Txn:
        if self.txn is not None and self.txn.open:
            raise UpstreamError("this session already has an open transaction; commit or roll "
                                "it back first")
        self.txn = Txn(self, self.upstream.get_ts())
        return self.txn

    def ddl(self, sql: str):
        return self.upstream.ddl(sql, self.database)

    def close(self) -> None:
        if self.txn is not None and self.txn.open:
            self.txn.rollback()
        try:
            self.conn.close()
        except pymysql.err.Error:
            pass  # already closed (a simulated crash)

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Txn:
    """A transaction; use as a context manager (commit on success, rollback on error)."""

    def __init__(self, session: Session, start_ts: int):
        self.session = session
        self.upstream = session.upstream
        self.start_ts = start_ts
        self.commit_ts = 0
        self.open = True
        self._cur = session.conn.cursor()
        self._muts: dict[int, _Mutation] = {}
        self._infos: dict[int, TableInfo] = {}
        self._primary: bytes | None = None
        self._sp = 0  # autocommit is off: InnoDB opens the transaction at the first statement
        self._registered = False  # status row written, schema version read (the prologue)
        self._version = 0

    # -- plumbing --------------------------------------------------------------------
    def _exec(self, sql: str, args=None, *, plain: bool = False) -> int:
        """Run ``sql``; return the affected row count."""
        return self._run(sql, args, plain)[0]

    def _rows(self, sql: str, args=None, *, plain: bool = False) -> list[tuple]:
        """Run ``sql``; return its rows."""
        return self._run(sql, args, plain)[1]

    def _run(self, sql: str, args, plain: bool) -> tuple[int, list[tuple]]:
        """Run ``sql``. The first non-``plain`` statement of the transaction carries the
        prologue in the same round trip (multi-statements): one ``INSERT ... SELECT``
        writes the txn-status row ``(start_ts, 0)`` (its row lock marks the transaction
        running) only if the schema version is still the snapshot's, and takes a shared
        lock on that version row, so no DDL catalog round commits before we do. A moved
        version (0 rows) costs one more round trip that reads it (see ``_check_schema``)."""
        prologue = not plain and not self._registered
        if prologue:
            up = self.upstream
            self._version = up.snapshot.version
            if up.check_schema_at_commit:
                sql = _PROLOGUE_SQL % (int(self.start_ts), int(self._version)) + sql
            else:
                sql = _STATUS_ROW_SQL % int(self.start_ts) + sql
        cur = self._cur
        try:
            n = cur.execute(sql, args)
        except pymysql.err.MySQLError as exc:
            self._failed(exc, sql, prologue)
        if prologue:
            inserted = n == 1
            self._registered = True
            try:
                cur.nextset()  # the caller's statement
            except pymysql.err.MySQLError as exc:
                self._failed(exc, sql, False)
            n = cur.rowcount
            if not inserted:
                rows = list(cur.fetchall())
                self._registered = False
                self._register_slow()
                return n, rows
        return n, list(cur.fetchall())

    def _register_slow(self) -> None:
        sql = _STATUS_ROW_SQL % int(self.start_ts) + _VERSION_SQL
        try:
            self._cur.execute(sql)
            self._cur.nextset()
            self._version = int(self._cur.fetchone()[0])
        except pymysql.err.MySQLError as exc:
            self._failed(exc, sql, True)
        self._registered = True

    def _failed(self, exc: pymysql.err.MySQLError, sql: str, in_prologue: bool):
        """Translate ``exc``; a failed prologue (e.g. a DDL holding the schema version
        past the lock wait timeout) aborts the transaction, since its status row may
        already be written."""
        if exc.args and exc.args[0] in (1213, 2006, 2013):  # deadlock / connection gone
            self.open = False
        if in_prologue and self.open:
            self.open = False
            try:
                self.session.conn.rollback()
            except pymysql.err.MySQLError:
                pass  # the connection is gone: MariaDB rolls back on its own
            raise UpstreamError(f"transaction start_ts={self.start_ts} aborted: its txn-status "
                                f"row / schema version could not be taken ({exc}); retry it",
                                sql=sql[:2000], code=exc.args[0] if exc.args else None) from exc
        raise translate(exc, sql) from exc

    def _check_open(self) -> None:
        if not self.open:
            raise UpstreamError(f"transaction start_ts={self.start_ts} is finished or aborted")

    def _target(self, table: str) -> tuple[str, TableInfo, TableCodec]:
        self._check_open()
        db, name = self.upstream.resolve(table, self.session.database)
        info = self.upstream.snapshot.table(db, name)
        seen = self._infos.get(info.id)
        if seen is not None and seen is not info:
            raise SchemaError(f"table {db}.{name} changed by a DDL during transaction "
                              f"start_ts={self.start_ts}; roll back and retry")
        self._infos[info.id] = info
        return f"{quote_id(db)}.{quote_id(name)}", info, self.upstream.codec(info)

    def _mutation(self, info: TableInfo) -> _Mutation:
        m = self._muts.get(info.id)
        if m is None:
            m = self._muts[info.id] = _Mutation(info.id)  # the logical id, even for partitions
        return m

    def _record(self, info: TableInfo, codec: TableCodec, tp: int, row, old=None) -> None:
        m = self._mutation(info)
        if tp == _INSERT:
            m.inserted.append(codec.insert_row(row))
        elif tp == _UPDATE:
            m.updated.append(codec.update_row(old, row))
        else:
            m.deleted.append(codec.delete_row(row))
        m.sequence.append(tp)
        if self._primary is None:
            self._primary = codec.key(row)

    def _savepoint(self):
        self._sp += 1
        name = f"tidb_binlog_sp{self._sp}"
        self._exec(f"SAVEPOINT {name}")
        return name, {tid: m.mark() for tid, m in self._muts.items()}, self._primary

    def _undo(self, sp) -> None:
        name, marks, primary = sp
        if self.open:
            self._exec(f"ROLLBACK TO SAVEPOINT {name}")
        for tid in list(self._muts):
            if tid in marks:
                self._muts[tid].reset(marks[tid])
            else:
                del self._muts[tid]
        self._primary = primary

    def _handle_where(self, codec: TableCodec, handles: Sequence) -> tuple[str, list]:
        if codec.kind == HANDLE_ROWID:
            cols = ["_tidb_rowid"]
        else:
            cols = [codec.columns[i].name.O for i in codec.pk_offsets]
        if len(cols) == 1:
            hs = [h[0] if isinstance(h, tuple) else h for h in handles]
            return f"{quote_id(cols[0])} IN ({', '.join(['%s'] * len(hs))})", hs
        one = "(" + ", ".join(["%s"] * len(cols)) + ")"
        args = [v for h in handles for v in h]
        return (f"({', '.join(quote_id(c) for c in cols)}) IN ({', '.join([one] * len(handles))})",
                args)

    # -- DML -------------------------------------------------------------------------
    def query(self, sql: str, args=None) -> list[tuple]:
        """A plain read inside the transaction (no binlog)."""
        self._check_open()
        return self._rows(sql, args, plain=True)

    def insert(self, table: str, rows: Iterable[dict]) -> int:
        """Insert dict rows (all with the same keys); return how many."""
        target, info, codec = self._target(table)
        escape = self.session.conn.escape
        count, batch, cols = 0, [], None
        for row in rows:
            if cols is None:
                cols = list(row)
            elif len(row) != len(cols) or any(c not in row for c in cols):
                raise UpstreamError(f"insert into {table}: every row needs the columns {cols}, "
                                    f"got {list(row)}")
            batch.append("(" + ", ".join(escape(row[c]) for c in cols) + ")")
            if len(batch) >= _BATCH_ROWS:
                count += self._insert_batch(target, info, codec, cols, batch)
                batch = []
        if batch:
            count += self._insert_batch(target, info, codec, cols, batch)
        return count

    def _insert_batch(self, target, info, codec, cols, values: list[str], verb="INSERT") -> int:
        col_sql = ", ".join(quote_id(c) for c in cols)
        rows = self._rows(f"{verb} INTO {target} ({col_sql}) VALUES {', '.join(values)} "
                          f"RETURNING {codec.select_list}")
        for r in rows:
            self._record(info, codec, _INSERT, r)
        return len(rows)

    def _set_clause(self, set_values: dict) -> tuple[str, list]:
        parts, args = [], []
        for col, v in set_values.items():
            if isinstance(v, Raw):
                parts.append(f"{quote_id(col)} = {v}")
            else:
                parts.append(f"{quote_id(col)} = %s")
                args.append(v)
        return ", ".join(parts), args

    def update(self, table: str, set_values: dict, where_sql: str = "1=1", args=()) -> int:
        """``UPDATE table SET set_values WHERE where_sql``; return the rows changed."""
        target, info, codec = self._target(table)
        if not set_values:
            raise UpstreamError(f"update of {table}: set_values is empty")
        olds = self._rows(f"SELECT {codec.select_list} FROM {target} WHERE {where_sql} FOR UPDATE",
                          args)
        if not olds:
            return 0
        set_sql, set_args = self._set_clause(set_values)
        pk_names = {codec.columns[i].name.L for i in codec.pk_offsets} \
            if codec.kind != HANDLE_ROWID else set()
        if not any(c.lower() in pk_names for c in set_values):
            changed = 0
            for start in range(0, len(olds), _BATCH_ROWS):
                chunk = olds[start:start + _BATCH_ROWS]
                hw, hargs = self._handle_where(codec, [codec.handle(r) for r in chunk])
                self._exec(f"UPDATE {target} SET {set_sql} WHERE {hw}", set_args + hargs)
                news = {codec.handle(r): r for r in self._rows(
                    f"SELECT {codec.select_list} FROM {target} WHERE {hw}", hargs)}
                for old in chunk:
                    new = news[codec.handle(old)]
                    if new != old:
                        self._record(info, codec, _UPDATE, new, old)
                        changed += 1
            return changed
        return self._update_handles(target, info, codec, olds, set_values, set_sql, set_args)

    def _update_handles(self, target, info, codec, olds, set_values, set_sql, set_args) -> int:
        sp = self._savepoint()
        try:
            changed = 0
            pk_cols = [codec.columns[i].name.O for i in codec.pk_offsets]
            for old in olds:
                hw, hargs = self._handle_where(codec, [codec.handle(old)])
                new_pk = list(codec.handle(old)) if isinstance(codec.handle(old), tuple) \
                    else [codec.handle(old)]
                for j, col in enumerate(pk_cols):
                    v = next((val for k, val in set_values.items() if k.lower() == col.lower()),
                             None)
                    if isinstance(v, Raw):
                        v = self._rows(f"SELECT {v} FROM {target} WHERE {hw}", hargs)[0][0]
                    if v is not None or any(k.lower() == col.lower() for k in set_values):
                        new_pk[j] = v
                self._exec(f"UPDATE {target} SET {set_sql} WHERE {hw}", set_args + hargs)
                nw, nargs = self._handle_where(codec, [tuple(new_pk)])
                new = self._rows(f"SELECT {codec.select_list} FROM {target} WHERE {nw}", nargs)[0]
                if new == old:
                    continue
                if codec.handle(new) == codec.handle(old):
                    self._record(info, codec, _UPDATE, new, old)
                else:  # TiDB: RemoveRecord(old) + AddRecord(new)
                    self._record(info, codec, _DELETE, old)
                    self._record(info, codec, _INSERT, new)
                changed += 1
            return changed
        except BaseException:
            self._undo(sp)
            raise

    def delete(self, table: str, where_sql: str = "1=1", args=()) -> int:
        """``DELETE FROM table WHERE where_sql``; return the rows deleted."""
        target, info, codec = self._target(table)
        rows = self._rows(f"DELETE FROM {target} WHERE {where_sql} RETURNING {codec.select_list}",
                          args)
        for r in rows:
            self._record(info, codec, _DELETE, r)
        return len(rows)

    def replace(self, table: str, rows: Iterable[dict]) -> int:
        """TiDB's REPLACE: per row, delete every row it conflicts with, then insert it."""
        target, info, codec = self._target(table)
        keys = [[c.name.O for c in k.columns] for k in info.unique_keys()]
        escape = self.session.conn.escape
        n = 0
        for row in rows:
            sp = self._savepoint()
            try:
                conds, args = [], []
                for cols in keys:
                    if all(any(k.lower() == c.lower() for k in row) for c in cols):
                        vals = [next(v for k, v in row.items() if k.lower() == c.lower())
                                for c in cols]
                        if None in vals:
                            continue
                        conds.append("(" + " AND ".join(f"{quote_id(c)} = %s" for c in cols) + ")")
                        args.extend(vals)
                olds = self._rows(f"SELECT {codec.select_list} FROM {target} WHERE "
                                  f"{' OR '.join(conds)} FOR UPDATE", args) if conds else []
                mark = {tid: m.mark() for tid, m in self._muts.items()}
                for old in olds:
                    hw, hargs = self._handle_where(codec, [codec.handle(old)])
                    self._exec(f"DELETE FROM {target} WHERE {hw}", hargs)
                    self._record(info, codec, _DELETE, old)
                cols = list(row)
                values = ["(" + ", ".join(escape(row[c]) for c in cols) + ")"]
                col_sql = ", ".join(quote_id(c) for c in cols)
                new = self._rows(f"INSERT INTO {target} ({col_sql}) VALUES {values[0]} "
                                 f"RETURNING {codec.select_list}")[0]
                if len(olds) == 1 and codec.kind != HANDLE_ROWID and olds[0] == new:
                    m = self._mutation(info)  # an identical row: TiDB changes nothing
                    m.reset(mark.get(info.id, (0, 0, 0, 0)))
                else:
                    self._record(info, codec, _INSERT, new)
                n += 1
            except BaseException:
                self._undo(sp)
                raise
        return n

    def execute(self, sql: str, args=None) -> int:
        """Run one INSERT/REPLACE ... VALUES, UPDATE ... SET ... [WHERE], DELETE FROM ...
        [WHERE] statement with capture; return the rows affected."""
        s = " ".join(sql.split()).rstrip(";")
        args = list(args or ())
        if m := re.fullmatch(r"(INSERT|REPLACE) INTO (\S+) \(([^)]*)\) VALUES? (.+)", s, re.I):
            cols = [c.strip().strip("`") for c in m[3].split(",")]
            tuples = re.findall(r"\(([^()]*)\)", m[4])
            if not all(t.replace(" ", "") == ",".join(["%s"] * len(cols)) for t in tuples):
                raise UpstreamError(f"execute: only %s placeholders are supported in VALUES: {sql}")
            rows = [dict(zip(cols, args[i * len(cols):(i + 1) * len(cols)], strict=True))
                    for i in range(len(tuples))]
            return (self.insert if m[1].upper() == "INSERT" else self.replace)(m[2], rows)
        if m := re.fullmatch(r"UPDATE (\S+) SET (.+?)(?: WHERE (.+))?", s, re.I):
            n_set = m[2].count("%s")
            set_values = {}
            for part in _split_top(m[2]):
                col, _, expr = part.partition("=")
                set_values[col.strip().strip("`")] = Raw(expr.strip())
            if n_set:  # bind the SET placeholders into the Raw expressions
                set_values = self._bind_set(set_values, args[:n_set])
            return self.update(m[1], set_values, m[3] or "1=1", args[n_set:])
        if m := re.fullmatch(r"DELETE FROM (\S+)(?: WHERE (.+))?", s, re.I):
            return self.delete(m[1], m[2] or "1=1", args)
        raise UpstreamError(f"execute supports INSERT/REPLACE ... VALUES, UPDATE and DELETE; got "
                            f"{sql[:200]!r}")

    def _bind_set(self, set_values: dict, args: list) -> dict:
        out, i = {}, 0
        for k, v in set_values.items():
            n = v.count("%s")
            out[k] = Raw(self._cur.mogrify(v, args[i:i + n])) if n else v
            i += n
        return out

    # -- commit / rollback -----------------------------------------------------------
    def _prewrite_value(self, schema_version: int) -> bytes:
        muts = [bl.new_table_mutation(m.table_id, inserted_rows=m.inserted, updated_rows=m.updated,
                                      deleted_rows=m.deleted, sequence=m.sequence)
                for m in self._muts.values() if m.sequence]
        return bl.encode(bl.new_prewrite_value(schema_version, muts))

    def _check_schema(self) -> int:
        """TiDB's schema check at commit: every table this transaction touched must be
        unchanged at the schema version read in the prologue (the shared lock keeps it
        current until COMMIT). Cheap when the catalog did not move: identity checks."""
        up = self.upstream
        snap = up.snapshot
        if snap.version != self._version:
            snap = up.reload()
        by_id = snap.tables_by_id
        for tid, info in self._infos.items():
            now = by_id.get(tid)
            if now is info:
                continue
            if now is None or now.to_obj() != info.to_obj():
                raise SchemaError(f"information schema is changed: table id {tid} was altered "
                                  f"during transaction start_ts={self.start_ts}; retry it")
        return self._version

    def commit(self) -> int:
        """Commit; return commit_ts (0 when nothing was written, so no binlog)."""
        self._check_open()
        up = self.upstream
        if not any(m.sequence for m in self._muts.values()):
            if self._registered:  # no binlog: its status row must not outlive it
                self._finish_plain(commit=True, sql=_DROP_STATUS_SQL % int(self.start_ts))
            else:
                self._finish_plain(commit=True)
            return 0
        try:
            version = self._check_schema() if up.check_schema_at_commit else self._version
            prewrite = bl.prewrite(self.start_ts, self._prewrite_value(version),
                                   prewrite_key=self._primary)
        except BaseException:
            self._finish_plain(commit=False)
            raise
        try:
            if up.faults.take("fail_prewrite"):
                raise UpstreamError("fault knob fail_prewrite: the prewrite binlog was not written")
            up.writer.write_binlog(prewrite)
        except BaseException as exc:
            self._finish_plain(commit=False)
            up.send_finish(self._finish(bl.BinlogType.ROLLBACK, 0))
            if isinstance(exc, UpstreamError):
                raise
            raise UpstreamError(f"prewrite binlog of start_ts={self.start_ts} failed, transaction "
                                f"rolled back: {exc}") from exc
        if up.faults.take("crash_after_prewrite"):
            self.open = False
            self.session.conn.close()  # COM_QUIT without COMMIT: MariaDB rolls back
            raise SimulatedCrash(f"fault knob crash_after_prewrite: start_ts={self.start_ts} "
                                 "prewritten, connection dropped without COMMIT")
        commit_ts = up.get_ts()  # row locks are still held
        try:
            self._exec(f"UPDATE {CATALOG_DB}.txn_status SET commit_ts=%s WHERE start_ts=%s; "
                       "COMMIT", (commit_ts, self.start_ts))
            while self._cur.nextset():
                pass
        except (pymysql.err.MySQLError, UpstreamError) as exc:
            self.open = False
            status = up.meta().txn_status(self.start_ts)
            if status.state == status.COMMITTED:
                self.commit_ts = commit_ts
                up.send_finish(self._finish(bl.BinlogType.COMMIT, commit_ts))
                return commit_ts
            if status.state == status.ROLLED_BACK:
                up.send_finish(self._finish(bl.BinlogType.ROLLBACK, 0))
            if isinstance(exc, UpstreamError):
                raise
            raise translate(exc, "COMMIT") from exc
        self.open = False
        self.commit_ts = commit_ts
        if not up.faults.take("drop_commit_binlog"):
            up.send_finish(self._finish(bl.BinlogType.COMMIT, commit_ts))
        return commit_ts

    def _finish(self, tp: int, commit_ts: int):
        # TiDB reuses the prewrite's Binlog: the finish binlog keeps prewrite_key.
        return bl.new_binlog(tp, self.start_ts, commit_ts, prewrite_key=self._primary)

    def _finish_plain(self, commit: bool, sql: str = "") -> None:
        """COMMIT / ROLLBACK without binlog (``sql`` runs first, in the same round trip)."""
        self.open = False
        try:
            if sql:
                self._cur.execute(sql + ("COMMIT" if commit else "ROLLBACK"))
                while self._cur.nextset():
                    pass
            elif commit:
                self.session.conn.commit()
            else:
                self.session.conn.rollback()
        except pymysql.err.MySQLError as exc:
            raise translate(exc, "COMMIT" if commit else "ROLLBACK") from exc

    def rollback(self) -> None:
        """Roll back; nothing was prewritten yet, so no binlog is written."""
        if self.open:
            self._finish_plain(commit=False)

    def __enter__(self) -> Txn:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            if self.open:
                self.commit()
        elif self.open:
            self.rollback()


def _split_top(s: str) -> list[str]:
    parts, depth, quote, cur = [], 0, None, []
    for ch in s:
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"`":
            quote = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
            continue
        cur.append(ch)
    parts.append("".join(cur))
    return parts
