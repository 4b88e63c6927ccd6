"""TSO timestamps: ``physical_ms << 18 | logical``, and an embedded oracle.

TiDB's timestamps come from PD. A TSO packs the wall-clock milliseconds in the
high bits and an 18-bit logical counter in the low bits, so timestamps are
unique and ordered even within one millisecond.

:class:`TimestampOracle` is PD's allocator in miniature. It is strictly
monotonic across threads (one lock) and across restarts: before it hands out a
timestamp whose physical part is above the persisted *high-water mark*, it
first persists a new mark ``window_ms`` ahead (write, fsync, rename). After a
crash the oracle restarts strictly above the last mark, so it never repeats a
timestamp even if the clock went backwards.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from tidb_binlog.errors import InvalidArgument, TSOError

__all__ = [
    "LOGICAL_BITS",
    "MAX_LOGICAL",
    "compose",
    "extract_physical",
    "extract_logical",
    "ts_from_unix_seconds",
    "unix_seconds_from_ts",
    "TimestampOracle",
]

LOGICAL_BITS = 18
MAX_LOGICAL = 1 << LOGICAL_BITS


def compose(physical_ms: int, logical: int) -> int:
    """Pack physical milliseconds and a logical counter into one TSO."""
    if not 0 <= logical < MAX_LOGICAL:
        raise InvalidArgument(f"logical part {logical} out of range [0, {MAX_LOGICAL})")
    if physical_ms < 0:
        raise InvalidArgument(f"physical part {physical_ms} is negative")
    return (physical_ms << LOGICAL_BITS) | logical


def extract_physical(ts: int) -> int:
    """The wall-clock milliseconds of a TSO."""
    return ts >> LOGICAL_BITS


def extract_logical(ts: int) -> int:
    """The logical counter of a TSO."""
    return ts & (MAX_LOGICAL - 1)


def ts_from_unix_seconds(seconds: float) -> int:
    """The smallest TSO at the given wall-clock time (logical 0)."""
    return compose(int(seconds * 1000), 0)


def unix_seconds_from_ts(ts: int) -> float:
    """Wall-clock seconds of a TSO's physical part."""
    return extract_physical(ts) / 1000.0


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class TimestampOracle:
    """Hands out strictly increasing TSOs, persisting a high-water mark.

    ``path`` is the file holding the mark (``None`` keeps it in memory only,
    for unit tests). ``window_ms`` is how far ahead the mark is persisted;
    a larger window means fewer fsyncs.
    """

    def __init__(self, path: str | os.PathLike | None = None, window_ms: int = 3000,
                 clock_ms=_now_ms):
        if window_ms <= 0:
            raise InvalidArgument("window_ms must be positive")
        self._path = Path(path) if path is not None else None
        self._window_ms = window_ms
        self._clock_ms = clock_ms
        self._lock = threading.Lock()
        saved = self._load()
        # Restart strictly above anything a previous run could have handed out.
        self._physical = max(self._clock_ms(), saved + 1)
        self._logical = 0
        self._saved_ms = saved
        self._persist(self._physical + self._window_ms)

    @property
    def high_water_mark_ms(self) -> int:
        return self._saved_ms

    def get_ts(self, count: int = 1) -> int:
        """Allocate ``count`` consecutive timestamps; return the first.

        All ``count`` timestamps share one physical millisecond, so the caller
        owns ``first, first + 1, ..., first + count - 1``.
        """
        if not 1 <= count < MAX_LOGICAL:
            raise TSOError(f"cannot allocate {count} timestamps at once (max {MAX_LOGICAL - 1})")
        with self._lock:
            now = self._clock_ms()
            if now > self._physical:
                self._physical, self._logical = now, 0
            if self._logical + count > MAX_LOGICAL:
                # The logical space of this millisecond is used up: move on.
                self._physical, self._logical = self._physical + 1, 0
            if self._physical >= self._saved_ms:
                self._persist(self._physical + self._window_ms)
            first = compose(self._physical, self._logical)
            self._logical += count
            return first

    def _load(self) -> int:
        if self._path is None or not self._path.exists():
            return 0
        text = self._path.read_text().strip()
        try:
            return int(text)
        except ValueError as exc:
            raise TSOError(
                f"TSO high-water mark file {self._path} is corrupt ({text!r}); "
                "delete it only if no timestamp from this oracle was ever used"
            ) from exc

    def _persist(self, mark_ms: int) -> None:
        if self._path is not None:
            self._path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self._path.with_suffix(".tmp")
            with open(tmp, "w") as f:
                f.write(f"{mark_ms}\n")
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self._path)
            dir_fd = os.open(self._path.parent, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        self._saved_ms = mark_ms
