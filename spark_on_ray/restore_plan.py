"""The pure half of ``restore``: stretches between DDLs, key-hash partitions, task batches.

No Ray, Spark or driver here (``spark_on_ray.restore`` runs it). A file-sink directory is
a sequence of transactions in commit order. A restore in parallel must keep two orders:

- **DDL order.** A DDL changes what every later row means, so the transactions are cut
  into *stretches* at each DDL (:func:`split_stretches`): a stretch's rows are applied,
  then the DDL alone, then the next stretch.
- **Order per key.** Inside a stretch the rows are spread over partitions by a hash of
  their key, so rows of one upstream row stay in one partition, in commit order
  (:func:`partition_rows`). "The key" is every unique key of the row, new and (for an
  update) old image: the drainer's own key strings
  (:func:`~tidb_binlog.drainer.apply.causality.row_keys`, which carry the table's name).
  An update that moves a row from key A to key B, or a unique-key swap, ties those keys
  together: keys linked by any row form one *component* (union-find), and a component
  goes to the partition ``stable_hash(its first key) % n``. So two rows that may touch
  the same downstream row are always in one partition, in their commit order; rows in
  different partitions touch disjoint rows and may run in any order. A table without a
  usable unique key is keyed by a hash of the whole row (as the drainer does).

Upstream transactions are split across partitions (as reparo's and the drainer's
workers split them): the downstream is consistent at the end of each stretch, not
between. :func:`group_txns` rebuilds one partition's rows into transactions again.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from tidb_binlog.drainer.apply.causality import row_keys, stable_hash
from tidb_binlog.drainer.apply.dml import DDL, DML, Txn
from tidb_binlog.errors import InvalidArgument

__all__ = ["Stretch", "split_stretches", "partition_rows", "group_txns"]


@dataclass
class Stretch:
    """Row changes ``(commit_ts, DML)`` in commit order, then (unless it is the last) the
    DDL that ends the stretch."""

    rows: list[tuple[int, DML]] = field(default_factory=list)
    ddl: DDL | None = None

    @property
    def first_ts(self) -> int:
        return self.rows[0][0] if self.rows else (self.ddl.commit_ts if self.ddl else 0)

    @property
    def last_ts(self) -> int:
        if self.ddl is not None:
            return self.ddl.commit_ts
        return self.rows[-1][0] if self.rows else 0


def split_stretches(txns: Iterable[Txn]) -> list[Stretch]:
    """Transactions in commit order → stretches, each ended by a DDL (the last may not
    be). Empty stretches only where two DDLs follow each other."""
    out = [Stretch()]
    for txn in txns:
        if txn.ddl is not None:
            out[-1].ddl = txn.ddl
            out.append(Stretch())
        else:
            out[-1].rows.extend((txn.commit_ts, d) for d in txn.dmls)
    if not out[-1].rows and out[-1].ddl is None and len(out) > 1:
        out.pop()
    return out


def partition_rows(rows: Sequence[tuple[int, DML]], partitions: int
                   ) -> list[list[tuple[int, DML]]]:
    """Spread ``rows`` (each DML with its table schema attached) over ``partitions``
    lists, keeping every component of linked keys in one list, in the input order (see
    the module doc)."""
    if partitions < 1:
        raise InvalidArgument(f"partitions must be >= 1, got {partitions}")
    parent: dict[str, str] = {}

    def find(key: str) -> str:
        root = key
        while (up := parent.get(root, root)) != root:
            root = up
        while key != root:  # path compression
            parent[key], key = root, parent[key]
        return root

    keyed = []
    for ts, dml in rows:
        keys = row_keys(dml)
        root = find(keys[0])
        parent.setdefault(root, root)
        for key in keys[1:]:
            other = find(key)
            if other != root:
                parent[other] = root
        keyed.append((ts, dml, keys[0]))
    out: list[list[tuple[int, DML]]] = [[] for _ in range(partitions)]
    for ts, dml, key in keyed:
        out[stable_hash(find(key)) % partitions].append((ts, dml))
    return out


def group_txns(rows: Iterable[tuple[int, DML]]) -> list[Txn]:
    """One partition's rows → transactions: consecutive rows of one commit_ts together."""
    out: list[Txn] = []
    ts0, batch = None, []
    for ts, dml in rows:
        if ts != ts0 and batch:
            out.append(Txn.of_dmls(ts0, tuple(batch)))
            batch = []
        ts0 = ts
        batch.append(dml)
    if batch:
        out.append(Txn.of_dmls(ts0, tuple(batch)))
    return out
