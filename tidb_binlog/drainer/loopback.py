"""Loop control for bidirectional replication (``[syncer] loopback-control``, ``channel-id``).

Two clusters A and B replicate into each other: drainer A→B applies A's transactions
to B, drainer B→A applies B's to A. Without loop control, a row A→B wrote into B comes
back in B's binlog, B→A writes it into A again, and so on forever. TiDB Binlog breaks the
loop with a **mark table**, ``retl._drainer_repl_mark``, and so do we, with the same table,
columns and rules, so a mixed setup (one side TiDB's drainer) agrees with ours:

- **Mark table** (:func:`mark_create_statements`): ``id`` (the SQL worker), ``channel_id``,
  ``val``, ``channel_info``, primary key ``(id, channel_id)``; created downstream at start
  with ``CREATE DATABASE/TABLE IF NOT EXISTS``. Each SQL worker (re)writes its own row
  ``(worker, channel-id, val = 1, '')`` when it starts (:func:`mark_init_statement`), so
  the row its transactions update is always there.
- **Every downstream transaction** of a worker carries ``UPDATE ... SET val = val + 1
  WHERE id = <worker> AND channel_id = <channel-id> LIMIT 1``
  (:func:`mark_update_statement`), inside the same transaction as its rows: the binlog the
  downstream cluster writes for that transaction therefore holds a row change of the mark
  table with our channel id.
- **The way back** (:class:`LoopbackFilter`): the drainer of the other direction, with
  ``loopback-control`` and the **same** ``channel-id`` (both directions of one pair use
  one channel id), drops every transaction that holds a row change of the mark table
  whose ``channel_id`` is its own (it becomes a skipped transaction: the checkpoint still
  passes it). TiDB compares the new image's ``channel_id`` as an int64; so do we.
  A large transaction applied in chunks (``txn-chunk-rows``) gets the same verdict before
  its first chunk, from its mark table rows alone (:meth:`LoopbackFilter.drops`, the
  keeper's ``RowKeeper._mark_rows``, read from the payload's bytes or, for a binlog
  served by reference, by range from the pump): dropped whole, its other rows never
  decoded; kept, each chunk then loses the other channels' mark rows as a whole
  transaction would.

What we add to TiDB's rules (TiDB would replicate these, and needs them never to happen):

- mark-table row changes of *another* channel are removed from the transaction before it
  is applied (the mark table is the drainers' bookkeeping, never user data), and
- the mark table's own DDL (any DDL on the ``retl`` database) is never replicated: each
  drainer creates the table itself where it writes, so its CREATE coming back would only
  loop.

User DDL is not marked (a DDL is not a transaction that can hold a mark row): run DDL on
one side only and set ``sync-ddl = false`` on the drainer that replicates towards that
side (TiDB's rule too), or the DDL comes back. :class:`LoopbackFilter` also applies
``sync-ddl = false``: DDLs are translated (the schema follows them) but not applied.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from tidb_binlog.drainer.apply.dml import DML, Txn
from tidb_binlog.drainer.apply.sql import Statement, quote_name, quote_table
from tidb_binlog.errors import ProtocolError

__all__ = [
    "MARK_DATABASE",
    "MARK_TABLE",
    "MARK_TABLE_NAME",
    "LoopbackFilter",
    "carries_mark",
    "is_mark_dml",
    "mark_create_statements",
    "mark_init_statement",
    "mark_update_statement",
]

log = logging.getLogger(__name__)

MARK_DATABASE = "retl"
MARK_TABLE = "_drainer_repl_mark"
MARK_TABLE_NAME = f"{MARK_DATABASE}.{MARK_TABLE}"
"""TiDB Binlog's ``loopbacksync.MarkTableName``."""

_QUALIFIED = quote_table(MARK_DATABASE, MARK_TABLE)


def mark_create_statements() -> list[Statement]:
    """The mark database and table, if missing (TiDB's ``CreateMarkDBDDL`` and
    ``CreateMarkTableDDL``: same columns, types and primary key)."""
    return [
        Statement(f"CREATE DATABASE IF NOT EXISTS {quote_name(MARK_DATABASE)}", None),
        Statement(f"CREATE TABLE IF NOT EXISTS {_QUALIFIED} ("
                  "`id` BIGINT NOT NULL, `channel_id` BIGINT NOT NULL DEFAULT 0, "
                  "`val` BIGINT DEFAULT 0, `channel_info` VARCHAR(64), "
                  "PRIMARY KEY (`id`, `channel_id`))", None),
    ]


def mark_init_statement(worker: int, channel_id: int) -> Statement:
    """Worker ``worker``'s row of the channel, (re)written at start with ``val = 1``
    (TiDB's ``InitMarkTableData``, one row per worker)."""
    return Statement(f"REPLACE INTO {_QUALIFIED} (`id`,`channel_id`,`val`,`channel_info`) "
                     "VALUES (%s,%s,%s,%s)", (worker, channel_id, 1, ""))


def mark_update_statement(worker: int, channel_id: int) -> Statement:
    """The mark every downstream transaction of the worker carries (TiDB's ``UpdateMark``).

    An UPDATE, as TiDB's, so the downstream's binlog holds an Update row change whose new
    image names the channel; the row exists because the worker wrote it at start."""
    return Statement(f"UPDATE {_QUALIFIED} SET `val` = `val` + 1 "
                     "WHERE `id` = %s AND `channel_id` = %s LIMIT 1", (worker, channel_id))


def is_mark_dml(dml: DML) -> bool:
    """Whether ``dml`` changes the mark table (names compared case-insensitively, as TiDB)."""
    return dml.table.lower() == MARK_TABLE and dml.database.lower() == MARK_DATABASE


def _channel_of(dml: DML) -> int | None:
    value = dml.values.get("channel_id")
    if value is None:
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ProtocolError(f"the mark table {MARK_TABLE_NAME} holds a channel_id that is not an "
                            f"integer ({value!r}); the table was changed by hand") from None


def carries_mark(txn: Txn, channel_id: int) -> bool:
    """Whether the transaction changed the mark table row of ``channel_id``: a transaction
    a drainer of this channel applied, coming back (TiDB's ``findLoopBackMark``)."""
    return any(is_mark_dml(d) and _channel_of(d) == channel_id for d in txn.dmls)


@dataclass
class LoopbackFilter:
    """What a drainer with ``loopback-control`` (and/or ``sync-ddl = false``) keeps of a
    translated transaction; see the module docstring. :meth:`apply` returns the
    transaction to apply, or None (skipped; the checkpoint passes it)."""

    loopback_control: bool = False
    channel_id: int = 0
    sync_ddl: bool = True
    dropped: int = 0        # transactions of our channel dropped (loops broken)
    marks_removed: int = 0  # mark rows of other channels removed from transactions

    @classmethod
    def from_settings(cls, settings) -> LoopbackFilter | None:
        """The filter of a task's :class:`~tidb_binlog.drainer.pipeline.settings.TaskSettings`,
        or None when it would keep everything (the common case costs nothing)."""
        if not settings.loopback_control and settings.sync_ddl:
            return None
        return cls(settings.loopback_control, settings.channel_id, settings.sync_ddl)

    def drops(self, commit_ts: int, mark_rows: list[DML]) -> bool:
        """The verdict on a large transaction from its mark table rows alone (decoded
        before its first chunk): True, it carries our channel's mark and is dropped
        whole (counted in :attr:`dropped`); False, its chunks go through :meth:`apply`,
        which then only removes the other channels' mark rows."""
        if not self.loopback_control or not any(
                is_mark_dml(d) and _channel_of(d) == self.channel_id for d in mark_rows):
            return False
        self.dropped += 1
        log.info("loopback-control: dropping the large transaction at commit_ts %s: it "
                 "carries channel %s's mark (it was applied by this channel's drainer)",
                 commit_ts, self.channel_id)
        return True

    def apply(self, txn: Txn | None) -> Txn | None:
        if txn is None:
            return None
        ddl = txn.ddl
        if ddl is not None:
            if not self.sync_ddl:
                log.info("sync-ddl = false: not applying the DDL at commit_ts %s: %s",
                         txn.commit_ts, ddl.sql)
                return None
            if self.loopback_control and ddl.database.lower() == MARK_DATABASE:
                log.info("loopback-control: not replicating the mark table's DDL at "
                         "commit_ts %s: %s", txn.commit_ts, ddl.sql)
                return None
            return txn
        if not self.loopback_control:
            return txn
        marks = [d for d in txn.dmls if is_mark_dml(d)]
        if not marks:
            return txn
        if any(_channel_of(d) == self.channel_id for d in marks):
            self.dropped += 1
            log.debug("loopback-control: dropping the transaction at commit_ts %s: it carries "
                      "channel %s's mark (it was applied by this channel's drainer)",
                      txn.commit_ts, self.channel_id)
            return None
        self.marks_removed += len(marks)
        rest = tuple(d for d in txn.dmls if not is_mark_dml(d))
        return Txn.of_dmls(txn.commit_ts, rest) if rest else None
