"""The Parquet lake's manifest: which files a reader may see, and the sink's checkpoint.

``<dir>/_manifest.json`` is the only source of truth. A change file exists for readers
only once it is listed here; a file in the directory but not in the manifest is a
leftover of a crash (written, renamed, but the manifest was not replaced yet) and
:func:`remove_unlisted` deletes it on the sink's reset.

Format (JSON object, ``format`` = :data:`FORMAT`, ``format_revision`` = :data:`REVISION`)::

    {"format": "tidb-binlog-parquet/1",
     "format_revision": 2,                 # additive revisions of format 1 (below)
     "commit_ts": 443322110000000001,      # everything at or below it is in the files
     "schema_version": 57,                 # the upstream schema version at commit_ts
     "files": [{"path": "shop/users/date=2026-11-25/part-<min>-<max>-v<ver>-<n>.parquet",
                "database": "shop", "table": "users", "date": "2026-11-25",
                "schema_version": 55, "min_commit_ts": ..., "max_commit_ts": ...,
                "rows": 1200, "bytes": 40960}, ...],          # in commit order
     "schemas": [{"database": "shop", "table": "users", "schema_version": 55,
                  "min_commit_ts": ...,             # its first row's commit_ts
                  "columns": [{"name": "id", "mysql_type": "bigint",
                               "arrow_type": "int64", "nullable": false,
                               "default": 0}, ...],
                  "primary_key": ["id"],
                  "unique_keys": [{"name": "PRIMARY", "columns": ["id"],
                                   "primary": true}, ...],
                  "handle": "int"}, ...],
     "ddls": [{"commit_ts": ..., "schema_version": 56, "database": "shop",
               "table": "users", "query": "ALTER TABLE ..."}, ...],
     "retired": [{"path": "...", "retired_at": 1764000000.0}, ...]}   # optional

``retired``: files a compaction (:mod:`.compact`) replaced by merged ones, kept for a
while for readers that read an older manifest; not part of the lake (readers use
``files`` only), never deleted by the sink's reset.

A file's ``schema_version`` names its ``schemas`` entry (same database and table): a
new entry is added when a table's columns (or keys) change, so a reader can merge the
files of one entry without casts; a table's entries are in commit order, each applying
to its rows from its ``min_commit_ts`` to the next one's (:meth:`Manifest.schema_at`).
A column's ``default`` is the value a row image lacking the column holds (a row written
before the column was added), JSON-encoded as :mod:`.arrow` says
(:func:`column_default` decodes it); ``nullable``, ``primary_key``, ``unique_keys``
(primary key first) and ``handle`` (``int``, ``common`` or ``rowid``: TiDB's row handle)
describe the table at that version.

**Revisions.** ``format`` stays ``tidb-binlog-parquet/1`` for every change a reader of
``/1`` can ignore (new fields only); ``format_revision`` counts them: 1 (absent) the
first, 2 adds the schema entries' ``min_commit_ts``, ``nullable``, ``default``,
``primary_key``, ``unique_keys`` and ``handle``. Entries written by an older sink lack
them (a lake started before): readers test each entry, not the revision. **Atomic update**: :func:`write_manifest` writes
``_manifest.json.tmp``, fsyncs it, renames it over ``_manifest.json`` and fsyncs the
directory; a reader sees the old or the new manifest, never a mix, and every file a
manifest lists was fsynced and renamed before that manifest was written.
"""

from __future__ import annotations

import base64
import datetime
import json
import os
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from tidb_binlog.errors import StorageError

__all__ = ["FORMAT", "REVISION", "MANIFEST_NAME", "Manifest", "read_manifest",
           "write_manifest", "committed_files", "remove_unlisted", "fsync_dir",
           "column_default"]

FORMAT = "tidb-binlog-parquet/1"
REVISION = 2
MANIFEST_NAME = "_manifest.json"


@dataclass
class Manifest:
    """The parsed manifest (see the module doc for the fields)."""

    commit_ts: int = 0
    schema_version: int = 0
    files: list[dict] = field(default_factory=list)
    schemas: list[dict] = field(default_factory=list)
    ddls: list[dict] = field(default_factory=list)
    retired: list[dict] = field(default_factory=list)
    revision: int = REVISION  # the format_revision read (an older sink's: 1); written: ours

    def to_json(self) -> str:
        doc = {"format": FORMAT, "format_revision": REVISION, "commit_ts": self.commit_ts,
               "schema_version": self.schema_version, "files": self.files,
               "schemas": self.schemas, "ddls": self.ddls}
        if self.retired:
            doc["retired"] = self.retired
        return json.dumps(doc, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str, where: str = MANIFEST_NAME) -> Manifest:
        try:
            doc = json.loads(text)
        except ValueError as exc:
            raise StorageError(f"{where} is not JSON ({exc}); it is the Parquet lake's manifest: "
                               "restore it from a backup or start a new directory") from None
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            got = doc.get("format") if isinstance(doc, dict) else type(doc).__name__
            raise StorageError(f"{where} has format {got!r}, expected {FORMAT!r}; this directory "
                               "was not written by this Parquet sink")
        return cls(int(doc["commit_ts"]), int(doc.get("schema_version", 0)),
                   list(doc.get("files", [])), list(doc.get("schemas", [])),
                   list(doc.get("ddls", [])), list(doc.get("retired", [])),
                   int(doc.get("format_revision", 1)))

    def schema_of(self, database: str, table: str, version: int) -> dict | None:
        """The ``schemas`` entry a file of ``database.table`` at ``version`` was written with."""
        for entry in reversed(self.schemas):
            if (entry["database"], entry["table"], entry["schema_version"]) == (
                    database, table, version):
                return entry
        return None

    def latest_schema(self, database: str, table: str) -> dict | None:
        for entry in reversed(self.schemas):
            if (entry["database"], entry["table"]) == (database, table):
                return entry
        return None

    def entry_min_commit_ts(self, entry: dict) -> int:
        """The entry's ``min_commit_ts``; for an older sink's entry (none recorded) the
        smallest of its files' (0 when it lists none)."""
        if "min_commit_ts" in entry:
            return int(entry["min_commit_ts"])
        key = (entry["database"], entry["table"], entry["schema_version"])
        return min((int(f["min_commit_ts"]) for f in self.files
                    if (f["database"], f["table"], f["schema_version"]) == key), default=0)

    def schema_at(self, database: str, table: str, commit_ts: int) -> dict | None:
        """The ``schemas`` entry of ``database.table`` that applies to a row of
        ``commit_ts``: the table's last entry whose ``min_commit_ts`` is at or below it
        (entries are in commit order); None before the table's first row. A DDL after
        the table's last row has no entry until a row follows it."""
        found = None
        for entry in self.schemas:
            if ((entry["database"], entry["table"]) == (database, table)
                    and self.entry_min_commit_ts(entry) <= commit_ts):
                found = entry
        return found


def column_default(column: dict) -> Any:
    """A ``schemas`` column's ``default`` as the value reading the lake gives
    (``pyarrow``'s ``to_pylist``: ``Decimal``, ``date``, ``datetime``, ``timedelta``,
    ``bytes``, numbers, text); None also when the entry does not say (an older sink)."""
    value = column.get("default")
    if value is None:
        return None
    arrow = column["arrow_type"]
    if arrow.startswith("decimal"):
        return Decimal(value)
    if arrow.startswith("date32"):
        return datetime.date.fromisoformat(value)
    if arrow.startswith("timestamp"):
        return datetime.datetime.fromisoformat(value)
    if arrow.startswith("duration"):
        return datetime.timedelta(microseconds=value)
    if arrow == "binary":
        return base64.b64decode(value)
    return value


def fsync_dir(path: str | os.PathLike) -> None:
    """Make a rename or create inside ``path`` durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_manifest(directory: str | os.PathLike) -> Manifest | None:
    """The lake's manifest, or None when the directory has none yet (a reader's entry
    point: then no change is committed)."""
    path = Path(directory) / MANIFEST_NAME
    try:
        text = path.read_text("utf-8")
    except FileNotFoundError:
        return None
    return Manifest.from_json(text, str(path))


def write_manifest(directory: str | os.PathLike, manifest: Manifest) -> None:
    """Replace the manifest atomically and durably (module doc)."""
    directory = Path(directory)
    tmp = directory / (MANIFEST_NAME + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(manifest.to_json())
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, directory / MANIFEST_NAME)
    fsync_dir(directory)


def committed_files(directory: str | os.PathLike, database: str | None = None,
                    table: str | None = None) -> list[str]:
    """Absolute paths of the committed change files, in commit order, optionally of one
    database / table. Only these may be read; anything else under the directory is
    in progress or a crash leftover."""
    manifest = read_manifest(directory)
    if manifest is None:
        return []
    root = Path(directory).resolve()
    return [str(root / f["path"]) for f in manifest.files
            if (database is None or f["database"] == database)
            and (table is None or f["table"] == table)]


def remove_unlisted(directory: str | os.PathLike, manifest: Manifest | None) -> list[str]:
    """Delete every ``.parquet`` / ``.tmp`` file under ``directory`` the manifest does not
    list (the sink's reset); returns their paths relative to the directory. Retired
    files (``retired``) stay: a compaction deletes them after its grace period."""
    root = Path(directory)
    listed = ({f["path"] for f in manifest.files} | {r["path"] for r in manifest.retired}
              if manifest is not None else set())
    removed = []
    for path in sorted(root.rglob("*")):
        if not path.is_file() or path.name == MANIFEST_NAME:
            continue
        if not (path.suffix == ".parquet" or path.name.endswith(".tmp")):
            continue
        rel = path.relative_to(root).as_posix()
        if rel not in listed:
            path.unlink()
            removed.append(rel)
    return removed
