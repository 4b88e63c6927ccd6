"""The kind of a DDL statement and where its schema/table names are, read from its SQL.

Two users: the event filter needs a DDL's event type (``create table``, ``alter
table``, ...: TiDB Binlog classifies the parsed statement the same way), and the router
rewrites the names of a routed table or schema. There is no SQL parser here, so
:func:`parse_ddl` reads the statement's tokens (identifiers, `quoted` identifiers,
strings, comments skipped) and knows these forms, which are every DDL TiDB writes for a
table or a database apart from views:

=====================================================  ===================  =============
form                                                   event                names found
=====================================================  ===================  =============
``CREATE DATABASE|SCHEMA [IF NOT EXISTS] d``           create database      d
``DROP DATABASE|SCHEMA [IF EXISTS] d``                 drop database        d
``ALTER DATABASE|SCHEMA [d] ...``                      alter database       d (if named)
``CREATE [TEMPORARY] TABLE [IF NOT EXISTS] t ...``     create table         t, ``LIKE`` s,
                                                                            ``REFERENCES`` r
``DROP [TEMPORARY] TABLE [IF EXISTS] t [, t2 ...]``    drop table           every t
``TRUNCATE [TABLE] t``                                 truncate table       t
``RENAME TABLE a TO b [, c TO d ...]``                 rename table         a, b, c, d
``ALTER [ONLINE|IGNORE] TABLE t ...``                  alter table          t, ``RENAME
                                                                            [TO|AS]`` u,
                                                                            ``REFERENCES``
                                                                            r, ``EXCHANGE
                                                                            ... WITH
                                                                            TABLE`` x
``CREATE [UNIQUE|FULLTEXT|SPATIAL] INDEX i ON t``      create index         t
``DROP INDEX i ON t``                                  drop index           t
``CREATE [OR REPLACE] ... VIEW``, ``DROP VIEW``        create/drop view     (not read)
=====================================================  ===================  =============

Any other statement has event ``""`` (TiDB's "null event": only ``ignore-sql`` can
match it) and ``complete = False``: its names are not known, so the router refuses to
route it (:class:`~tidb_binlog.filter.router.Router`). A ``CREATE TABLE ... SELECT`` is
not complete either (the SELECT may name tables).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["NameRef", "DDLShape", "parse_ddl", "rewrite_names", "unquote"]

_TOKEN = re.compile(r"""
    (?P<skip>\s+|/\*.*?\*/|--(?=\s|$)[^\n]*|\#[^\n]*)
  | (?P<quoted>`(?:[^`]|``)*`)
  | (?P<string>'(?:[^'\\]|\\.|'')*'|"(?:[^"\\]|\\.|"")*")
  | (?P<word>[\w$\u0080-\uffff]+)
  | (?P<punct>.)
""", re.VERBOSE | re.DOTALL)


@dataclass(frozen=True)
class _Tok:
    kind: str  # quoted | string | word | punct
    text: str
    start: int
    end: int

    def kw(self, *words: str) -> bool:
        return self.kind == "word" and self.text.upper() in words

    @property
    def is_name(self) -> bool:
        return self.kind in ("word", "quoted")


@dataclass(frozen=True)
class NameRef:
    """One schema or table name in the SQL: ``kind`` ``"db"`` or ``"table"``; ``schema``
    is None for an unqualified table name; ``start:end`` its span (qualifier included)."""

    kind: str
    schema: str | None
    name: str
    start: int
    end: int


@dataclass(frozen=True)
class DDLShape:
    """What :func:`parse_ddl` read: the event type, the names, and whether those are
    all the names the statement holds (``complete``)."""

    event: str
    names: tuple[NameRef, ...] = ()
    complete: bool = False


def unquote(text: str) -> str:
    """An identifier token's name (backquotes removed, doubled ones undone)."""
    if text.startswith("`"):
        return text[1:-1].replace("``", "`")
    return text


def _tokens(sql: str) -> list[_Tok]:
    out = []
    for m in _TOKEN.finditer(sql):
        kind = m.lastgroup
        if kind != "skip":
            out.append(_Tok(kind, m.group(), m.start(), m.end()))
    while out and out[-1].text == ";":  # a trailing statement terminator
        out.pop()
    return out


class _Reader:
    """A cursor over the tokens with the few steps the forms need."""

    def __init__(self, toks: list[_Tok]):
        self.toks = toks
        self.i = 0
        self.names: list[NameRef] = []

    def peek(self, k: int = 0) -> _Tok | None:
        j = self.i + k
        return self.toks[j] if j < len(self.toks) else None

    def accept(self, *words: str) -> bool:
        tok = self.peek()
        if tok is not None and tok.kw(*words):
            self.i += 1
            return True
        return False

    def accept_seq(self, *words: str) -> bool:
        """Consume ``words`` in order when all are next (``IF NOT EXISTS``)."""
        for k, word in enumerate(words):
            tok = self.peek(k)
            if tok is None or not tok.kw(word):
                return False
        self.i += len(words)
        return True

    def name(self, kind: str) -> bool:
        """Read ``name`` or ``schema.name`` into ``names``; False when none is next."""
        tok = self.peek()
        if tok is None or not tok.is_name:
            return False
        dot, second = self.peek(1), self.peek(2)
        if (kind == "table" and dot is not None and dot.text == "." and second is not None
                and second.is_name):
            self.names.append(NameRef(kind, unquote(tok.text), unquote(second.text),
                                      tok.start, second.end))
            self.i += 3
        else:
            self.names.append(NameRef(kind, None, unquote(tok.text), tok.start, tok.end))
            self.i += 1
        return True

    def names_after(self, keyword: str, start: int) -> None:
        """Every ``<keyword> name`` from token ``start`` on (``REFERENCES r``)."""
        for j in range(start, len(self.toks) - 1):
            if self.toks[j].kw(keyword):
                self.i = j + 1
                self.name("table")


def parse_ddl(sql: str) -> DDLShape:
    """The event type and names of one DDL statement (see the module doc)."""
    r = _Reader(_tokens(sql))
    if r.accept("CREATE"):
        return _create(r)
    if r.accept("DROP"):
        return _drop(r)
    if r.accept("ALTER"):
        return _alter(r)
    if r.accept("TRUNCATE"):
        r.accept("TABLE")
        ok = r.name("table") and r.peek() is None
        return DDLShape("truncate table", tuple(r.names), ok)
    if r.accept("RENAME"):
        if not r.accept("TABLE", "TABLES"):
            return DDLShape("")
        while True:
            if not (r.name("table") and r.accept("TO") and r.name("table")):
                return DDLShape("rename table", tuple(r.names), False)
            if r.peek() is None:
                return DDLShape("rename table", tuple(r.names), True)
            if r.peek().text != ",":
                return DDLShape("rename table", tuple(r.names), False)
            r.i += 1
    return DDLShape("")


def _database(r: _Reader, event: str, *exists: str) -> DDLShape:
    r.accept_seq(*exists)
    ok = r.name("db")
    return DDLShape(event, tuple(r.names), ok)


def _create(r: _Reader) -> DDLShape:
    if r.accept("DATABASE", "SCHEMA"):
        return _database(r, "create database", "IF", "NOT", "EXISTS")
    r.accept_seq("OR", "REPLACE")
    if r.accept("UNIQUE", "FULLTEXT", "SPATIAL") or (r.peek() and r.peek().kw("INDEX")):
        if not r.accept("INDEX"):
            return DDLShape("")
        r.accept_seq("IF", "NOT", "EXISTS")
        ok = r.name("index") and r.accept("ON") and r.name("table")
        names = tuple(n for n in r.names if n.kind == "table")
        return DDLShape("create index", names, bool(ok))
    for k in range(len(r.toks) - r.i):
        tok = r.peek(k)
        if tok.kw("VIEW"):
            return DDLShape("create view")
        if tok.kw("TABLE"):
            break
    r.accept("GLOBAL")
    r.accept("TEMPORARY")
    if not r.accept("TABLE"):
        return DDLShape("")
    r.accept_seq("IF", "NOT", "EXISTS")
    if not r.name("table"):
        return DDLShape("create table")
    body = r.i
    if r.peek() is not None and r.peek().text == "(":
        r.i += 1
    if r.accept("LIKE"):
        r.name("table")
    r.names_after("REFERENCES", body)
    complete = not any(t.kw("SELECT") for t in r.toks[body:])
    return DDLShape("create table", tuple(r.names), complete)


def _drop(r: _Reader) -> DDLShape:
    if r.accept("DATABASE", "SCHEMA"):
        return _database(r, "drop database", "IF", "EXISTS")
    if r.accept("VIEW"):
        return DDLShape("drop view")
    if r.accept("INDEX"):
        r.accept_seq("IF", "EXISTS")
        ok = r.name("index") and r.accept("ON") and r.name("table")
        names = tuple(n for n in r.names if n.kind == "table")
        return DDLShape("drop index", names, bool(ok))
    r.accept("TEMPORARY")
    if not r.accept("TABLE", "TABLES"):
        return DDLShape("")
    r.accept_seq("IF", "EXISTS")
    while r.name("table"):
        tok = r.peek()
        if tok is None:
            return DDLShape("drop table", tuple(r.names), True)
        if tok.text != ",":
            r.accept("RESTRICT", "CASCADE")
            return DDLShape("drop table", tuple(r.names), r.peek() is None)
        r.i += 1
    return DDLShape("drop table", tuple(r.names), False)


_ALTER_DB_OPTIONS = ("DEFAULT", "CHARACTER", "CHARSET", "COLLATE", "ENCRYPTION", "READ",
                     "PLACEMENT", "SET", "COMMENT")


def _alter(r: _Reader) -> DDLShape:
    if r.accept("DATABASE", "SCHEMA"):
        tok = r.peek()
        if tok is None or tok.kw(*_ALTER_DB_OPTIONS) or not tok.is_name:
            return DDLShape("alter database", (), True)  # the current database
        return _database(r, "alter database")
    while r.accept("ONLINE", "OFFLINE", "IGNORE"):
        pass
    if not r.accept("TABLE"):
        return DDLShape("")
    if not r.name("table"):
        return DDLShape("alter table")
    body = r.i
    for j in range(body, len(r.toks) - 1):
        tok = r.toks[j]
        if tok.kw("RENAME"):
            nxt = r.toks[j + 1]
            if nxt.kw("COLUMN", "INDEX", "KEY"):
                continue
            r.i = j + 1
            r.accept("TO", "AS")
            r.name("table")
        elif tok.kw("EXCHANGE"):
            for k in range(j + 1, len(r.toks) - 1):
                if r.toks[k].kw("TABLE"):
                    r.i = k + 1
                    r.name("table")
                    break
    r.names_after("REFERENCES", body)
    return DDLShape("alter table", tuple(r.names), True)


def rewrite_names(sql: str, shape: DDLShape, new_text: Callable[[NameRef], str | None]) -> str:
    """``sql`` with each name of ``shape`` replaced by ``new_text(name)`` (None: kept)."""
    out = sql
    for ref in sorted(shape.names, key=lambda n: n.start, reverse=True):
        text = new_text(ref)
        if text is not None:
            out = out[:ref.start] + text + out[ref.end:]
    return out
