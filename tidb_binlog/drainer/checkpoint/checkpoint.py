"""Checkpoint formats and the rule that advances the checkpoint (pure part).

**Formats** (byte-compatible with TiDB Binlog's drainer):

- Downstream table (MySQL/TiDB sinks)::

      CREATE TABLE IF NOT EXISTS `tidb_binlog`.`checkpoint`
          (clusterID BIGINT UNSIGNED PRIMARY KEY, checkPoint MEDIUMTEXT)

  One row per upstream cluster, saved with ``REPLACE INTO ... VALUES (id, json)``.
  The JSON is Go's ``json.Marshal`` of the checkpoint: compact, fields in this
  order, ts-map keys sorted::

      {"consistent":false,"commitTS":414529105591271429,"ts-map":{},"schema-version":52}

  ``ts-map`` holds ``primary-ts``/``secondary-ts`` only when the downstream's own
  TSO was read (TiDB downstream).  Decoding accepts missing fields (defaults:
  false, 0, {}, 0), ``"ts-map":null``, and ignores unknown fields, as Go does.
  Ours after them, only when one is non-zero: ``"applied-rows"`` and ``"ddl-jobs"``, the
  task's status counters as of ``commitTS`` (rows and DDL jobs committed at or below it),
  and ``"resets"`` (pipeline replays so far, saved when one starts), so they survive
  any restart of any actor: a restarted task starts from the saved counts and its
  replay counts only what lies above the checkpoint, once. TiDB's drainer ignores
  these fields when it loads the row and drops them when it saves.
- File sinks: ``<data-dir>/savepoint``, TOML with ``consistent``, ``commitTS``,
  ``schema-version`` (the format ``binlogctl -cmd generate_meta`` writes).

``consistent`` = the downstream is exactly the upstream snapshot at ``commitTS``
(true only after a clean exit); ``schema-version`` = the highest upstream schema
version applied, and it never decreases.  A missing checkpoint, or one with
``commitTS`` 0, starts from ``initial-commit-ts`` (:func:`start_commit_ts`),
where -1 means "the upstream TSO now" (:func:`resolve_initial_commit_ts`).

**Advance rule** (:class:`Advancer`).  The shell registers every item in commit
order as it dispatches it (``register(commit_ts, parts)``: a transaction split
over several workers has several parts) and acknowledges parts as workers commit
them, in any order (``ack``).  Fake binlogs, filtered or skipped transactions are
registered already done (``register_done``).  The checkpoint is the highest
registered commit_ts at or below which every registered item is fully acked, so
it never passes anything not yet committed downstream, and a fake binlog moves it
only once everything before it is acked.

**Save cadence** (``due(now_s)``): a save is due when the checkpoint moved past
the last saved ts and either ``save_interval_s`` (3 s) passed since the last save
or a DDL was passed (a DDL is saved at once).  ``final()`` is the checkpoint to
save on a clean exit: ``consistent`` is true only when nothing is pending.
"""

from __future__ import annotations

import json
import tomllib
from collections import deque
from dataclasses import dataclass, field, replace

from tidb_binlog.drainer.apply.sql import Statement, quote_table
from tidb_binlog.errors import ConfigError, InvalidArgument, ProtocolError

__all__ = [
    "Checkpoint",
    "encode_json",
    "decode_json",
    "encode_savepoint",
    "decode_savepoint",
    "resolve_initial_commit_ts",
    "start_commit_ts",
    "CHECKPOINT_SCHEMA",
    "CHECKPOINT_TABLE",
    "SAVEPOINT_FILE",
    "SAVE_INTERVAL_S",
    "create_statements",
    "save_statement",
    "load_statement",
    "Advancer",
]

# Downstream location of the checkpoint; one row per upstream cluster id, replaced
# whole on every save, so a reader sees either the previous or the new checkpoint.
CHECKPOINT_SCHEMA = "tidb_binlog"
CHECKPOINT_TABLE = "checkpoint"
# File sink checkpoint in data-dir; written to a temporary file and renamed, so it
# always holds one complete savepoint.
SAVEPOINT_FILE = "savepoint"
SAVE_INTERVAL_S = 3.0
INITIAL_COMMIT_TS_NOW = -1


@dataclass(frozen=True)
class Checkpoint:
    """One saved position: ``commit_ts`` and what TiDB stores beside it."""

    commit_ts: int
    consistent: bool = False
    schema_version: int = 0
    ts_map: dict[str, int] = field(default_factory=dict)
    # Ours, status counters (see the module doc); not part of the position, so two
    # checkpoints at the same position compare equal whatever they counted.
    applied_rows: int = field(default=0, compare=False)  # rows committed at or below
    ddl_jobs: int = field(default=0, compare=False)      # DDL jobs applied at or below
    resets: int = field(default=0, compare=False)        # pipeline replays so far


def encode_json(cp: Checkpoint) -> str:
    """TiDB's checkPoint column text (compact, Go field order, sorted ts-map)."""
    doc = {"consistent": cp.consistent, "commitTS": cp.commit_ts,
           "ts-map": dict(sorted(cp.ts_map.items())), "schema-version": cp.schema_version}
    if cp.applied_rows or cp.ddl_jobs or cp.resets:  # ours, after TiDB's (Go ignores them)
        doc.update({"applied-rows": cp.applied_rows, "ddl-jobs": cp.ddl_jobs,
                    "resets": cp.resets})
    return json.dumps(doc, separators=(",", ":"))


def _int_field(doc: dict, key: str, where: str, error) -> int:
    value = doc.get(key, 0)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int):
        raise error(f"{where}: {key!r} must be an integer, got {value!r}", key)
    return value


def _bool_field(doc: dict, key: str, where: str, error) -> bool:
    value = doc.get(key, False)
    if not isinstance(value, bool):
        raise error(f"{where}: {key!r} must be true or false, got {value!r}", key)
    return value


def decode_json(text: str | bytes) -> Checkpoint:
    """Parse the checkPoint column; ProtocolError says what is wrong and where."""
    where = "checkpoint row in `tidb_binlog`.`checkpoint`"

    def error(msg, key=None):
        return ProtocolError(msg + "; fix or delete the row (the drainer then starts from "
                             "initial-commit-ts)")

    try:
        doc = json.loads(text)
    except (ValueError, UnicodeDecodeError) as exc:
        raise error(f"{where} is not JSON ({exc}): {text[:200]!r}") from exc
    if not isinstance(doc, dict):
        raise error(f"{where} must be a JSON object, got {type(doc).__name__}")
    ts_map = doc.get("ts-map") or {}
    if not isinstance(ts_map, dict) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in ts_map.values()):
        raise error(f"{where}: 'ts-map' must map names to integers, got {ts_map!r}")
    return Checkpoint(commit_ts=_int_field(doc, "commitTS", where, error),
                      consistent=_bool_field(doc, "consistent", where, error),
                      schema_version=_int_field(doc, "schema-version", where, error),
                      ts_map=dict(ts_map),
                      applied_rows=_int_field(doc, "applied-rows", where, error),
                      ddl_jobs=_int_field(doc, "ddl-jobs", where, error),
                      resets=_int_field(doc, "resets", where, error))


def encode_savepoint(cp: Checkpoint) -> str:
    """The savepoint file's TOML (what TiDB's file checkpoint writes)."""
    return (f"consistent = {'true' if cp.consistent else 'false'}\n"
            f"commitTS = {cp.commit_ts}\n"
            f"schema-version = {cp.schema_version}\n")


def decode_savepoint(text: str, path: str | None = None) -> Checkpoint:
    """Parse a savepoint file; ConfigError names the key and the file."""
    where = f"savepoint file {path or '(text)'}"

    def error(msg, key=None):
        return ConfigError(msg + "; fix the file or delete it (the drainer then starts "
                           "from initial-commit-ts)", key=key, path=path)

    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise error(f"{where} is not valid TOML: {exc}") from exc
    return Checkpoint(commit_ts=_int_field(doc, "commitTS", where, error),
                      consistent=_bool_field(doc, "consistent", where, error),
                      schema_version=_int_field(doc, "schema-version", where, error))


def resolve_initial_commit_ts(configured: int, now_ts: int) -> int:
    """``initial-commit-ts``: -1 means ``now_ts`` (the upstream TSO now)."""
    if configured == INITIAL_COMMIT_TS_NOW:
        return now_ts
    if configured < 0:
        raise ConfigError(f"initial-commit-ts must be -1 (now) or a TSO >= 0, got "
                          f"{configured}", key="initial-commit-ts")
    return configured


def start_commit_ts(loaded: Checkpoint | None, initial_commit_ts: int) -> Checkpoint:
    """The checkpoint to start from: the loaded one, unless missing or at commitTS 0."""
    if loaded is None:
        return Checkpoint(commit_ts=initial_commit_ts)
    if loaded.commit_ts == 0:
        return replace(loaded, commit_ts=initial_commit_ts)
    return loaded


def create_statements(schema: str = CHECKPOINT_SCHEMA,
                      table: str = CHECKPOINT_TABLE) -> list[Statement]:
    """Create the checkpoint schema and table if missing."""
    return [Statement(f"CREATE SCHEMA IF NOT EXISTS {quote_table('', schema)}", None),
            Statement(f"CREATE TABLE IF NOT EXISTS {quote_table(schema, table)} "
                      "(clusterID BIGINT UNSIGNED PRIMARY KEY, checkPoint MEDIUMTEXT)", None)]


def save_statement(cluster_id: int, cp: Checkpoint, schema: str = CHECKPOINT_SCHEMA,
                   table: str = CHECKPOINT_TABLE) -> Statement:
    return Statement(f"REPLACE INTO {quote_table(schema, table)} VALUES (%s,%s)",
                     (cluster_id, encode_json(cp)))


def load_statement(cluster_id: int, schema: str = CHECKPOINT_SCHEMA,
                   table: str = CHECKPOINT_TABLE) -> Statement:
    return Statement(f"SELECT checkPoint FROM {quote_table(schema, table)} "
                     "WHERE clusterID = %s", (cluster_id,))


class _Item:
    __slots__ = ("commit_ts", "remaining", "ddl", "schema_version", "rows")

    def __init__(self, commit_ts: int, remaining: int, ddl: bool, schema_version: int,
                 rows: int = 0):
        self.commit_ts = commit_ts
        self.remaining = remaining
        self.ddl = ddl
        self.schema_version = schema_version
        self.rows = rows


class Advancer:
    """The advance rule and save cadence; see the module docstring."""

    def __init__(self, start: Checkpoint, *, save_interval_s: float = SAVE_INTERVAL_S,
                 now_s: float = 0.0):
        self._commit_ts = start.commit_ts
        self._schema_version = start.schema_version
        self._last_registered = start.commit_ts
        self._pending: deque[_Item] = deque()
        self._by_ts: dict[int, _Item] = {}
        self.save_interval_s = save_interval_s
        self._saved_ts = start.commit_ts
        self._saved_at_s = now_s
        self._ddl_ts = start.commit_ts  # highest DDL commit_ts the checkpoint passed
        self._rows = start.applied_rows  # rows of the items the checkpoint passed
        self._ddls = start.ddl_jobs      # DDL items the checkpoint passed
        self.resets = start.resets       # carried through unchanged

    @property
    def commit_ts(self) -> int:
        """Everything registered at or below this is committed downstream."""
        return self._commit_ts

    @property
    def schema_version(self) -> int:
        return self._schema_version

    @property
    def applied_rows(self) -> int:
        """Rows of every item at or below the checkpoint (carried by the saved checkpoint,
        so the count survives restarts: the replay counts only what lies above it)."""
        return self._rows

    @property
    def ddl_jobs(self) -> int:
        """DDL items at or below the checkpoint (saved with it, like ``applied_rows``)."""
        return self._ddls

    @property
    def pending(self) -> int:
        """Registered items not yet passed by the checkpoint."""
        return len(self._pending)

    def register(self, commit_ts: int, parts: int = 1, *, ddl: bool = False,
                 schema_version: int = 0, rows: int = 0) -> None:
        """An item dispatched in commit order, done when ``parts`` acks arrived;
        ``rows`` are counted in :attr:`applied_rows` once the checkpoint passes it."""
        if commit_ts <= self._last_registered:
            raise ProtocolError(f"checkpoint items must be registered in ascending commit_ts: "
                                f"{commit_ts} after {self._last_registered}")
        if parts < 0:
            raise InvalidArgument(f"parts must be >= 0, got {parts}")
        item = _Item(commit_ts, parts, ddl, schema_version, rows)
        self._last_registered = commit_ts
        self._pending.append(item)
        if parts:
            self._by_ts[commit_ts] = item
        self._advance()

    def add_rows(self, commit_ts: int, rows: int) -> None:
        """Count ``rows`` for the item registered last, at ``commit_ts`` (for callers
        that register through another object, e.g. the Dispatcher); it may already be
        passed (acked at once)."""
        pending = self._pending
        if pending and pending[-1].commit_ts == commit_ts:
            pending[-1].rows += rows
        elif commit_ts == self._last_registered and commit_ts <= self._commit_ts:
            self._rows += rows
        else:
            raise ProtocolError(f"rows counted for commit_ts {commit_ts}, which is not the "
                                f"item registered last ({self._last_registered})")

    def register_done(self, commit_ts: int, *, ddl: bool = False,
                      schema_version: int = 0) -> None:
        """A fake binlog or a skipped txn: nothing to wait for but what came before."""
        self.register(commit_ts, 0, ddl=ddl, schema_version=schema_version)

    def ack(self, commit_ts: int, parts: int = 1) -> None:
        """``parts`` parts of the item at ``commit_ts`` are committed downstream."""
        item = self._by_ts.get(commit_ts)
        if item is None or parts > item.remaining:
            raise ProtocolError(f"ack of {parts} part(s) at commit_ts {commit_ts}, which has "
                                f"{item.remaining if item else 'no'} pending part(s)")
        item.remaining -= parts
        if item.remaining == 0:
            del self._by_ts[commit_ts]
            self._advance()

    def ack_parts(self, parts) -> None:
        """One part acknowledged for each ``(commit_ts, _)`` of ``parts`` (a worker's
        Send): :meth:`ack` per part, the checkpoint advanced once at the end."""
        by_ts = self._by_ts
        done = False
        for commit_ts, _ in parts:
            item = by_ts.get(commit_ts)
            if item is None or item.remaining < 1:
                raise ProtocolError(f"ack of 1 part(s) at commit_ts {commit_ts}, which has "
                                    f"{item.remaining if item else 'no'} pending part(s)")
            item.remaining -= 1
            if not item.remaining:
                del by_ts[commit_ts]
                done = True
        if done:
            self._advance()

    def _advance(self) -> None:
        pending = self._pending
        while pending and pending[0].remaining == 0:
            item = pending.popleft()
            self._commit_ts = item.commit_ts
            self._rows += item.rows
            if item.schema_version > self._schema_version:
                self._schema_version = item.schema_version
            if item.ddl:
                self._ddl_ts = item.commit_ts
                self._ddls += 1

    def checkpoint(self) -> Checkpoint:
        """The checkpoint to save now (``consistent`` false: workers may be mid-stream)."""
        return Checkpoint(self._commit_ts, False, self._schema_version,
                          applied_rows=self._rows, ddl_jobs=self._ddls,
                          resets=self.resets)

    def due(self, now_s: float) -> bool:
        """Whether a save is due: moved, and 3 s passed or a DDL was passed."""
        if self._commit_ts <= self._saved_ts:
            return False
        return self._ddl_ts > self._saved_ts or now_s - self._saved_at_s >= self.save_interval_s

    @property
    def saved_ts(self) -> int:
        """The highest commit_ts saved (or loaded at the start): the durable checkpoint."""
        return self._saved_ts

    def saved(self, cp: Checkpoint, now_s: float) -> None:
        """``cp`` (from checkpoint()) is durably saved at ``now_s``."""
        self._saved_ts = max(self._saved_ts, cp.commit_ts)
        self._saved_at_s = now_s

    def final(self) -> Checkpoint:
        """The checkpoint for a clean exit: consistent only if nothing is pending."""
        return Checkpoint(self._commit_ts, not self._pending, self._schema_version,
                          applied_rows=self._rows, ddl_jobs=self._ddls,
                          resets=self.resets)
