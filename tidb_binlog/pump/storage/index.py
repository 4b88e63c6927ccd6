"""The pump's LevelDB index (``<data-dir>/kv``, through plyvel).

Keys (TiDB Binlog's names and encodings):

- ``ts:`` + 8-byte big-endian ts → 12-byte value pointer (or :data:`LOST`). The ts is the
  start_ts of a Prewrite and the commit_ts of a Commit or fake binlog, so
  iterating ``ts:`` keys in order walks binlogs by timestamp. Rollbacks with
  commit_ts 0 are not indexed (TiDB writes them all to ``ts:0``, which nobody
  reads).
- Meta keys (``!`` sorts before ``t``, so they never mix with ``ts:`` keys);
  see the constants below for each invariant.

All plyvel errors are translated to :class:`~tidb_binlog.errors.StorageError`
here, the one boundary with LevelDB.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import islice

import plyvel

from tidb_binlog.errors import StorageError
from tidb_binlog.pump.storage.vlog_record import POINTER_SIZE, ValuePointer

__all__ = [
    "TS_KEY_PREFIX",
    "GC_TS_KEY",
    "MAX_COMMIT_TS_KEY",
    "HANDLE_POINTER_KEY",
    "HEAD_POINTER_KEY",
    "KVOptions",
    "LOST",
    "ts_key",
    "Index",
]

TS_KEY_PREFIX = b"ts:"
# gc_ts (8-byte LE). Invariant: written (synced) before any data at or below it is
# deleted; pulls with since_commit_ts < gc_ts are refused.
GC_TS_KEY = b"!binlog!gcts"
# max_commit_ts (8-byte LE). Invariant: every commit with commit_ts at or below it
# is indexed, and every prewrite stored before it is matched; written in the same
# batch as (or after) the index entries it covers, together with handlePointer.
MAX_COMMIT_TS_KEY = b"!binlog!maxCommitTS"
# handlePointer (12-byte pointer). Invariant: every value-log record before it has
# been fed to the sorter and settled, and maxCommitTS covers its commits; a restart
# re-feeds the sorter from here.
HANDLE_POINTER_KEY = b"!binlog!handlePointer"
# headPointer (12-byte pointer). Invariant: every value-log record before it is in
# the index (written in the same batch as those entries); a restart re-indexes
# from here.
HEAD_POINTER_KEY = b"!binlog!headPointer"

# The pointer of an index entry whose record was cut from the value log on recovery (a
# damaged tail): kept as a marker, so a pull reaching that ts stops with DamagedBinlog
# instead of passing a lost acknowledged binlog silently. No file has this id.
LOST = ValuePointer(0xFFFFFFFF, 0)

_U64 = struct.Struct("<Q")
_KEY_LEN = len(TS_KEY_PREFIX) + 8
_POINTER_STRUCT = struct.Struct("<Iq")  # ValuePointer's layout (fid u32, offset i64)


@dataclass(frozen=True)
class KVOptions:
    """LevelDB tuning (``[storage.kv]``); defaults follow TiDB Binlog's where plyvel has them."""

    write_buffer_bytes: int = 64 * 2**20
    block_cache_bytes: int = 8 * 2**20
    block_size_bytes: int = 4 * 2**10
    block_restart_interval: int = 16
    max_file_bytes: int = 64 * 2**20


def ts_key(ts: int) -> bytes:
    return TS_KEY_PREFIX + ts.to_bytes(8, "big")


class Index:
    """ts → value pointer, plus the four meta keys."""

    def __init__(self, path: str, options: KVOptions = KVOptions()):
        self.path = path
        try:
            self._db = plyvel.DB(
                path, create_if_missing=True, write_buffer_size=options.write_buffer_bytes,
                lru_cache_size=options.block_cache_bytes, block_size=options.block_size_bytes,
                block_restart_interval=options.block_restart_interval,
                max_file_size=options.max_file_bytes)
        except (plyvel.Error, OSError) as exc:
            raise StorageError(f"cannot open the pump index at {path}: {exc}; "
                               "is another pump using this data-dir?") from exc

    # -- meta ------------------------------------------------------------------------
    def get_int(self, key: bytes) -> int:
        raw = self._get(key)
        if raw is None:
            return 0
        if len(raw) != 8:
            raise StorageError(f"index {self.path}: meta key {key!r} holds {len(raw)} bytes, "
                               "expected 8; the index is damaged (delete kv/ to rebuild it "
                               "from the value log)")
        return _U64.unpack(raw)[0]

    def get_pointer(self, key: bytes) -> ValuePointer | None:
        raw = self._get(key)
        return None if raw is None else ValuePointer.decode(raw)

    def put_int(self, key: bytes, value: int, *, sync: bool = True) -> None:
        self._write([], {key: _U64.pack(value)}, sync)

    @staticmethod
    def int_value(value: int) -> bytes:
        return _U64.pack(value)

    # -- ts keys ---------------------------------------------------------------------
    def lookup(self, ts: int) -> ValuePointer | None:
        raw = self._get(ts_key(ts))
        return None if raw is None else ValuePointer.decode(raw)

    def write(self, entries: Iterable[tuple[bytes, bytes]], meta: dict[bytes, bytes],
              sync: bool = False) -> None:
        """One atomic batch of ``(key, pointer bytes)`` entries plus meta values."""
        self._write(entries, meta, sync)

    def _write(self, entries, meta, sync: bool) -> None:
        try:
            with self._db.write_batch(sync=sync) as wb:
                for k, v in entries:
                    wb.put(k, v)
                for k, v in meta.items():
                    wb.put(k, v)
        except (plyvel.Error, OSError) as exc:
            raise StorageError(f"index {self.path}: batch write failed: {exc}") from exc

    def iter_range(self, after_ts: int, upto_ts: int) -> Iterator[tuple[int, ValuePointer]]:
        """``(ts, pointer)`` for ``after_ts < ts <= upto_ts``, ascending."""
        if upto_ts <= after_ts:
            return
        try:
            it = self._db.iterator(start=ts_key(after_ts + 1), stop=ts_key(upto_ts) + b"\x00")
            new, unpack, from_bytes = tuple.__new__, _POINTER_STRUCT.unpack, int.from_bytes
            with it:
                for k, v in it:
                    if len(k) == _KEY_LEN:
                        # ValuePointer.decode without its Python-level constructor (two per
                        # served txn); a value of the wrong size goes through it and raises
                        ptr = (new(ValuePointer, unpack(v)) if len(v) == POINTER_SIZE
                               else ValuePointer.decode(v))
                        yield from_bytes(k[3:], "big"), ptr
        except (plyvel.Error, OSError) as exc:
            raise StorageError(f"index {self.path}: read failed: {exc}") from exc

    def delete_upto(self, ts: int, batch_size: int = 1024) -> int:
        """Delete ``ts:`` keys at or below ``ts`` in batches; return how many."""
        deleted = 0
        while True:
            try:
                with self._db.iterator(start=TS_KEY_PREFIX, stop=ts_key(ts) + b"\x00",
                                       include_value=False) as it:
                    keys = list(islice(it, batch_size))
                if not keys:
                    return deleted
                with self._db.write_batch() as wb:
                    for k in keys:
                        wb.delete(k)
            except (plyvel.Error, OSError) as exc:
                raise StorageError(f"index {self.path}: GC delete failed: {exc}") from exc
            deleted += len(keys)

    def close(self) -> None:
        if not self._db.closed:
            self._db.close()

    def _get(self, key: bytes) -> bytes | None:
        try:
            return self._db.get(key)
        except (plyvel.Error, OSError) as exc:
            raise StorageError(f"index {self.path}: read of {key!r} failed: {exc}") from exc
