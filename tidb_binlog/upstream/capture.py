"""DML row capture: the half of a transaction that changes rows and records their images.

:class:`DmlCapture` is the base of :class:`~tidb_binlog.upstream.txn.Txn`. Its DML
methods change rows in MariaDB *and* capture exact row images inside the
transaction, encoded by :class:`~tidb_binlog.upstream.rows.TableCodec` as TiDB's
binlog mutations:

- ``insert(table, rows)``: ``INSERT ... RETURNING`` gives the rows as stored
  (auto-increment values, defaults, coercions) → Insert mutations;
- ``update(table, set_values, where_sql, args)``: ``SELECT ... FOR UPDATE`` with the
  WHERE locks and reads the old rows; the UPDATE is then applied by handle and the
  new rows read back by handle, again with a locking read (a plain SELECT would read
  the transaction's snapshot, older than rows other sessions committed since; a row
  that is gone counts 0) → Update mutations. A row whose handle changes (its
  int or clustered primary key is updated) becomes DeleteRow + Insert, as TiDB's
  ``updateRecord`` does; an unchanged row writes nothing;
- ``delete(table, where_sql, args)``: ``DELETE ... RETURNING`` → DeleteRow;
- ``replace(table, rows)``: conflicting rows (by any unique key) are locked and
  deleted, then the row inserted, as TiDB's REPLACE (an identical row is a no-op);
- ``execute(sql, args)``: the same for a plain INSERT/REPLACE/UPDATE/DELETE text.

Multi-step operations run under a SAVEPOINT so a failed statement leaves neither
rows nor mutations behind (TiDB's statement atomicity).

Mutations are kept per table id (the logical id, even for partitions) in
statement order; ``_prewrite_value`` turns them into the ``PrewriteValue`` of
the Prewrite binlog, and the record key of the first changed row is the
``prewrite_key``. Running statements (and the transaction prologue riding the
first one) is the subclass's: it provides ``_exec``, ``_rows`` and
``_check_open``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from tidb_binlog import binlog as bl
from tidb_binlog.errors import SchemaChanged, UpstreamError
from tidb_binlog.model import HANDLE_ROWID, TableInfo
from tidb_binlog.upstream.prewrite_payload import PrewriteEncoder
from tidb_binlog.upstream.rows import TableCodec, quote_id

__all__ = ["DmlCapture", "Raw"]

_BATCH_ROWS = 1000
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


class DmlCapture:
    """Row capture for one transaction; the statement runner is the subclass's."""

    # Provided by the transaction (Txn): the session and its Upstream, start_ts, open,
    # and the cursor its statements run on.
    session: object
    upstream: object
    start_ts: int
    open: bool
    _cur: object

    def __init__(self) -> None:
        self._muts: dict[int, _Mutation] = {}
        self._infos: dict[int, TableInfo] = {}
        self._primary: bytes | None = None
        self._sp = 0  # autocommit is off: InnoDB opens the transaction at the first statement

    def _exec(self, sql: str, args=None, *, plain: bool = False) -> int:
        raise NotImplementedError  # run sql in the transaction; return the affected row count

    def _rows(self, sql: str, args=None, *, plain: bool = False) -> list[tuple]:
        raise NotImplementedError  # run sql in the transaction; return its rows

    def _check_open(self) -> None:
        raise NotImplementedError  # raise UpstreamError when the transaction is finished

    # -- capture ---------------------------------------------------------------------
    def _target(self, table: str) -> tuple[str, TableInfo, TableCodec]:
        self._check_open()
        db, name = self.upstream.resolve(table, self.session.database)
        info = self.upstream.snapshot.table(db, name)
        seen = self._infos.get(info.id)
        if seen is not None and seen is not info:
            raise SchemaChanged(f"table {db}.{name} changed by a DDL during transaction "
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
                # A locking read: a plain SELECT would read the transaction's snapshot, which
                # misses what other sessions committed since (a row the UPDATE left as it was).
                news = {codec.handle(r): r for r in self._rows(
                    f"SELECT {codec.select_list} FROM {target} WHERE {hw} FOR UPDATE", hargs)}
                for old in chunk:
                    new = news.get(codec.handle(old))
                    if new is not None and new != old:
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
                new = None
                for j, col in enumerate(pk_cols):
                    v = next((val for k, val in set_values.items() if k.lower() == col.lower()),
                             None)
                    if isinstance(v, Raw):  # evaluated on the locked, latest version
                        got = self._rows(f"SELECT {v} FROM {target} WHERE {hw} FOR UPDATE", hargs)
                        if not got:
                            break
                        v = got[0][0]
                    if v is not None or any(k.lower() == col.lower() for k in set_values):
                        new_pk[j] = v
                else:
                    new = self._update_one(target, codec, set_sql, set_args, hw, hargs, new_pk)
                if new is None or new == old:  # gone (0 rows affected) or unchanged
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

    def _update_one(self, target, codec, set_sql, set_args, hw, hargs, new_pk):
        """UPDATE one row by handle; its new image read under the lock (None: gone)."""
        if not self._exec(f"UPDATE {target} SET {set_sql} WHERE {hw}", set_args + hargs):
            return None  # the locked row was not changed or is gone: nothing to record
        nw, nargs = self._handle_where(codec, [tuple(new_pk)])
        got = self._rows(f"SELECT {codec.select_list} FROM {target} WHERE {nw} FOR UPDATE", nargs)
        return got[0] if got else None

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

    # -- output ----------------------------------------------------------------------
    def _prewrite_encoder(self, schema_version: int) -> PrewriteEncoder:
        """The serialized Prewrite binlog, written from the row images with one copy
        (:class:`~tidb_binlog.upstream.prewrite_payload.PrewriteEncoder`)."""
        return PrewriteEncoder(self.start_ts, schema_version,
                               [m for m in self._muts.values() if m.sequence], self._primary)

    def _prewrite_value(self, schema_version: int) -> bytes:
        muts = [bl.new_table_mutation(m.table_id, inserted_rows=m.inserted, updated_rows=m.updated,
                                      deleted_rows=m.deleted, sequence=m.sequence)
                for m in self._muts.values() if m.sequence]
        return bl.encode(bl.new_prewrite_value(schema_version, muts))


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
