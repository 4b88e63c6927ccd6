"""Compaction of the Parquet lake: many small change files of a partition → fewer large ones.

A long-running lake accumulates one file per table and partition per flush (every
``flush-interval`` when changes trickle in), and readers pay per file. :func:`compact`
merges runs of small files and replaces the manifest atomically. What a reader may rely
on (``README.md``) stays true:

- **Only consecutive files of one table, date and schema version are merged** (a run:
  no file of that table lies between them in the manifest's order). So a merged file
  holds rows of one ``schemas`` entry, its rows stay in commit order, and the
  ``[min_commit_ts, max_commit_ts]`` ranges of one table still never overlap. The
  merged file takes the place of the run's first file in ``files``.
- **The manifest's ``commit_ts``, ``schema_version``, ``schemas`` and ``ddls`` are
  unchanged**: compaction moves rows between files, never changes what is committed.
- **Atomic for readers**: the merged files are written to temp files, fsynced and
  renamed first, then the manifest is replaced (:func:`~.manifest.write_manifest`): a
  reader sees the old file list or the new one, each complete. The replaced files are
  not deleted at once (a reader that read the old manifest may still be reading them):
  they are listed under the manifest's ``retired`` with the time of their retirement,
  and a later compaction deletes those retired more than ``grace_s`` ago (the sink's
  reset keeps them too: :func:`~.manifest.remove_unlisted`).
- **One writer at a time**: the sink holds the lake's lock (``_lock``,
  :class:`LakeLock`) from its reset to its close, and compaction takes it too, so it
  refuses to run while a drainer writes the lake (and a drainer started meanwhile
  refuses to open it). Stop the drainer, compact, start it again; nothing is replayed.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from tidb_binlog.drainer.sinks.parquet.manifest import (
    Manifest,
    fsync_dir,
    read_manifest,
    write_manifest,
)
from tidb_binlog.errors import InvalidArgument, StorageError

__all__ = ["LakeLock", "CompactResult", "compact", "plan_runs", "LOCK_NAME",
           "TARGET_BYTES", "GRACE_S"]

LOCK_NAME = "_lock"
TARGET_BYTES = 128 << 20   # a merged file grows up to about this size (Parquet bytes)
GRACE_S = 600.0            # replaced files are kept this long for readers still at them
ROW_GROUP_ROWS = 131_072   # rows per row group of a merged file
COMPRESSION = "zstd"


class LakeLock:
    """An exclusive lock on the lake directory (``<dir>/_lock``, a POSIX record lock:
    released when the holding process exits, so a killed sink never leaves it behind).
    ``who`` names the holder in the other side's error."""

    def __init__(self, directory: str | os.PathLike, who: str):
        self.path = Path(directory) / LOCK_NAME
        self.who = who
        self._fd: int | None = None

    def acquire(self) -> None:
        if self._fd is not None:
            return
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.pread(fd, 200, 0).decode("utf-8", "replace").strip() or "?"
            os.close(fd)
            raise StorageError(
                f"the Parquet lake {self.path.parent} is in use by {holder}; only one writer "
                f"at a time ({self.who} needs it): stop the drainer writing it before "
                "compacting, or wait for the compaction to finish before starting the "
                "drainer") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{self.who} (pid {os.getpid()})\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor drops the record lock
            self._fd = None

    def __enter__(self) -> LakeLock:
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()


@dataclass
class CompactResult:
    """What :func:`compact` did (the command prints it)."""

    merged_files: int = 0       # files replaced by merged ones
    new_files: int = 0          # merged files written
    rows: int = 0               # rows moved
    deleted_retired: int = 0    # retired files deleted (older than the grace period)
    kept_retired: int = 0       # retired files kept for readers
    groups: list[dict] = field(default_factory=list)  # the new files' manifest entries


def plan_runs(files: list[dict], target_bytes: int) -> list[list[int]]:
    """Indexes into ``files`` of each group to merge (two files or more, each smaller than
    ``target_bytes``, consecutive within their table, same date and schema version,
    together about ``target_bytes`` at most). Pure: the planning half of :func:`compact`."""
    by_table: dict[tuple[str, str], list[int]] = {}
    for i, f in enumerate(files):
        by_table.setdefault((f["database"], f["table"]), []).append(i)
    groups: list[list[int]] = []
    for indexes in by_table.values():
        group: list[int] = []
        size = 0
        for i in indexes:
            f = files[i]
            fits = (group and (f["date"], f["schema_version"]) == (
                files[group[0]]["date"], files[group[0]]["schema_version"])
                and size + f["bytes"] <= target_bytes)
            if f["bytes"] >= target_bytes:  # a large file ends the run, stays as it is
                if len(group) > 1:
                    groups.append(group)
                group, size = [], 0
                continue
            if group and not fits:
                if len(group) > 1:
                    groups.append(group)
                group, size = [], 0
            group.append(i)
            size += f["bytes"]
        if len(group) > 1:
            groups.append(group)
    return groups


def compact(directory: str | os.PathLike, *, target_bytes: int = TARGET_BYTES,
            grace_s: float = GRACE_S, dry_run: bool = False,
            clock: Callable[[], float] = time.time) -> CompactResult:
    """Merge the lake's small files and replace the manifest (module doc), under the
    lake's lock. ``dry_run``: plan and report only."""
    directory = Path(directory)
    if target_bytes < 1:
        raise InvalidArgument(f"target_bytes must be >= 1, got {target_bytes}")
    with LakeLock(directory, "tidb-binlog parquet-compact"):
        manifest = read_manifest(directory)
        if manifest is None:
            raise StorageError(f"{directory} has no _manifest.json: it is not a Parquet lake "
                               "(or its drainer never started); pass the sink's "
                               "[syncer.to] dir")
        result = CompactResult()
        now = clock()
        due = [r for r in manifest.retired if now - r["retired_at"] >= grace_s]
        result.deleted_retired = len(due)
        result.kept_retired = len(manifest.retired) - len(due)
        groups = plan_runs(manifest.files, target_bytes)
        if dry_run:
            for group in groups:
                result.merged_files += len(group)
                result.new_files += 1
                result.rows += sum(manifest.files[i]["rows"] for i in group)
            return result
        if due:
            # listed no more first, then deleted: a crash between leaves unlisted files,
            # which the sink's next reset deletes
            manifest.retired = [r for r in manifest.retired if r not in due]
            write_manifest(directory, manifest)
            for r in due:
                (directory / r["path"]).unlink(missing_ok=True)
        if not groups:
            return result
        replaced: dict[int, dict | None] = {}
        seq = len(manifest.files)
        for group in groups:
            entry = _merge(directory, manifest, group, seq)
            seq += 1
            replaced[group[0]] = entry
            for i in group[1:]:
                replaced[i] = None
            result.merged_files += len(group)
            result.new_files += 1
            result.rows += entry["rows"]
            result.groups.append(entry)
        retired_at = clock()
        manifest.retired.extend({"path": manifest.files[i]["path"], "retired_at": retired_at}
                                for i in replaced)
        manifest.files = [replaced[i] if i in replaced else f
                          for i, f in enumerate(manifest.files)
                          if replaced.get(i, f) is not None]
        write_manifest(directory, manifest)
        result.kept_retired += len(replaced)
        return result


def _merge(directory: Path, manifest: Manifest, group: list[int], seq: int) -> dict:
    """Write the group's rows into one new file (temp, fsync, rename); its manifest entry."""
    files = [manifest.files[i] for i in group]
    first, last = files[0], files[-1]
    rel = (f"{first['database']}/{first['table']}/date={first['date']}/part-"
           f"{first['min_commit_ts']}-{last['max_commit_ts']}-v{first['schema_version']}"
           f"-c{seq}.parquet")
    path = directory / rel
    tmp = path.with_name(f".{path.name}.tmp")
    rows = 0
    writer = None
    pending: list[pa.RecordBatch] = []
    pending_rows = 0
    try:
        with open(tmp, "wb") as out:
            for f in files:
                source = pq.ParquetFile(directory / f["path"])
                for batch in source.iter_batches(batch_size=ROW_GROUP_ROWS):
                    if writer is None:
                        writer = pq.ParquetWriter(out, batch.schema, compression=COMPRESSION)
                    elif batch.schema != writer.schema:
                        batch = pa.Table.from_batches([batch]).cast(writer.schema).to_batches()[0]
                    pending.append(batch)
                    pending_rows += batch.num_rows
                    if pending_rows >= ROW_GROUP_ROWS:
                        writer.write_table(pa.Table.from_batches(pending))
                        rows += pending_rows
                        pending, pending_rows = [], 0
            if pending:
                writer.write_table(pa.Table.from_batches(pending))
                rows += pending_rows
            if writer is not None:
                writer.close()
            out.flush()
            os.fsync(out.fileno())
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    want = sum(f["rows"] for f in files)
    if rows != want:
        tmp.unlink(missing_ok=True)
        raise StorageError(f"compacting {rel}: its files hold {rows} rows, the manifest lists "
                           f"{want}; the lake is damaged, nothing was changed")
    os.replace(tmp, path)
    fsync_dir(path.parent)
    return {"path": rel, "database": first["database"], "table": first["table"],
            "date": first["date"], "schema_version": first["schema_version"],
            "min_commit_ts": first["min_commit_ts"], "max_commit_ts": last["max_commit_ts"],
            "rows": rows, "bytes": path.stat().st_size}
