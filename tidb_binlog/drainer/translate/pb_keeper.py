"""The file sink's keeper: :class:`PbKeeper` translates merged binlogs into pb records
(:class:`~tidb_binlog.drainer.translate.pb.PbTranslator`) with the schema of their time
(:class:`~tidb_binlog.drainer.translate.schema_at.SchemaAt`), large transactions one
record part per call.
"""

from __future__ import annotations

import logging
from collections import deque

from tidb_binlog import binlog as bl
from tidb_binlog.binlog_ref import is_ref
from tidb_binlog.drainer.pipeline.gate import PipelineReset
from tidb_binlog.drainer.pipeline.merge_loop import keeper_items
from tidb_binlog.drainer.translate import payload_read
from tidb_binlog.drainer.translate.payload_read import whole_payload
from tidb_binlog.drainer.translate.pb import PbTranslator, RecordPart, record_head
from tidb_binlog.drainer.translate.schema_at import SchemaAt
from tidb_binlog.logs import txn as txn_fields

__all__ = ["PbKeeper"]

# the keepers' logger, named as before they were split out of keeper.py
log = logging.getLogger("tidb_binlog.drainer.translate.keeper")


class PbKeeper(SchemaAt):
    """Translates merged binlogs into pb records (the file sink's keeper).

    **Large transactions** (more than ``[syncer] txn-chunk-rows`` row changes):
    :meth:`translate_more` hands such a transaction out one part per call
    (:meth:`PbTranslator.chunks <tidb_binlog.drainer.translate.pb.PbTranslator.chunks>`,
    the binlog read in place), each ``(commit_ts, RecordPart, schema_version)``, and
    answers ``more`` so the merger calls again; the file sink spills the parts and
    appends the record at the last one. Neither holds the decoded rows nor the record
    whole. Items arriving meanwhile wait here, undecoded. A binlog served by reference
    (``[syncer] large-binlog-bytes``) is read from its pump the same way, through a
    window, each event's row read by range: this keeper never holds its payload."""

    _pb: PbTranslator | None = None
    _pb_queue: deque | None = None
    # the transaction being handed out: [commit_ts, its parts, parts handed out]
    _pb_chunked: list | None = None

    def reset(self, schema_version: int) -> int:
        """:meth:`SchemaAt.reset`; a transaction half handed out is dropped with the items
        queued behind it (the sink was reset too: the replay brings them again)."""
        version = super().reset(schema_version)
        self._pb_queue = deque()
        self._pb_chunked = None
        return version

    def translate(self, items) -> list[tuple[int, bytes | None, int]]:
        """``(commit_ts, payload)`` in commit order (possibly packed) →
        ``(commit_ts, record | None, schema_version)``."""
        pb = self._pb_translator()
        out = []
        for commit_ts, binlog in self._decoded(items, "pb keeper"):
            if binlog is None:
                out.append((commit_ts, None, 0))
                continue
            record = pb.translate(binlog)
            out.append((commit_ts, record, self.translator.keeper.schema_version))
        return out

    def translate_more(self, items) -> tuple[list, bool]:
        """:meth:`translate` with large transactions in parts (class doc): ``(out,
        more)``; a part is ``(commit_ts, RecordPart, schema_version)``."""
        max_rows = max(self.settings.txn_chunk_rows, 0)
        if not max_rows:
            return self.translate(items), False
        if not self._placed:
            raise PipelineReset("the pb keeper restarted: its schema must be rebuilt at the "
                                "checkpoint before it translates")
        queue = self._pb_queue
        queue.extend(keeper_items(items))  # a large payload: a view, not a copy
        out: list = []
        if self._pb_chunked is not None:
            self._next_part(out)
        pb = self._pb_translator()
        while self._pb_chunked is None and queue:
            commit_ts, payload = queue.popleft()
            if commit_ts in self._ignored_ts:
                log.warning("skipping the transaction at commit_ts %s (ignore-txn-commit-ts)",
                            commit_ts, extra=txn_fields(commit_ts))
                out.append((commit_ts, None, 0))
                continue
            if is_ref(payload):  # read in ranges from the pump, part by part
                payload = self.open_payload(payload)
            parts = pb.chunks(payload, max_rows, payload_read.REF_WINDOW_BYTES)
            if parts is None:
                record = pb.translate(bl.decode(whole_payload(payload)))
                out.append((commit_ts, record, self.translator.keeper.schema_version))
                continue
            del payload  # held by its parts only
            self._pb_chunked = [commit_ts, parts, 0]
            self._next_part(out)
            if self._pb_chunked is not None:
                log.info("transaction at commit_ts %s has more than %d row changes: writing "
                         "its record in parts", commit_ts, max_rows,
                         extra=txn_fields(commit_ts))
        return out, self._pb_chunked is not None or bool(queue)

    def _next_part(self, out: list) -> None:
        """The large transaction's next part into ``out``: nothing for an empty one but
        the last; a last one with no part before it is the whole record (or None)."""
        c = self._pb_chunked
        commit_ts, parts, handed = c
        events, last = next(parts)
        version = self.translator.keeper.schema_version
        if not last:
            if events:
                c[2] = handed + 1
                out.append((commit_ts, RecordPart(events, handed + 1, False), version))
            return
        self._pb_chunked = None
        if handed:
            out.append((commit_ts, RecordPart(events, handed + 1, True), version))
        else:
            out.append((commit_ts, record_head(commit_ts, len(events)) + events
                        if events else None, version))

    def _pb_translator(self) -> PbTranslator:
        if self._pb is None or self._pb.translator is not self.translator:
            self._pb = PbTranslator(self.translator, ignore_schemas=self.settings.ignore_schemas,
                                    tz=self.settings.tzinfo())
        return self._pb
