"""The file sink's keeper: :class:`PbKeeper` translates merged binlogs into pb records
(:class:`~tidb_binlog.drainer.translate.pb.PbTranslator`) with the schema of their time
(:class:`~tidb_binlog.drainer.translate.schema_at.SchemaAt`), large transactions one
record part per call.
"""

from __future__ import annotations

from collections.abc import Iterator

from tidb_binlog import binlog as bl
from tidb_binlog.drainer.translate import payload_read
from tidb_binlog.drainer.translate.payload_read import whole_payload
from tidb_binlog.drainer.translate.pb import PbTranslator, RecordPart, record_head
from tidb_binlog.drainer.translate.schema_at import Chunks, SchemaAt

__all__ = ["PbKeeper"]


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
        """:meth:`translate` with large transactions in parts (class doc,
        :meth:`SchemaAt._translate_more`): ``(out, more)``; a part is ``(commit_ts,
        RecordPart, schema_version)``."""
        return self._translate_more(items, "pb keeper")

    def _open(self, commit_ts: int, payload, max_rows: int
              ) -> tuple[bytes | None, Iterator | None]:
        """``(record | None, None)``, or ``(None, parts)`` for a large transaction."""
        pb = self._pb_translator()
        parts = pb.chunks(payload, max_rows, payload_read.REF_WINDOW_BYTES)
        if parts is None:
            return pb.translate(bl.decode(whole_payload(payload))), None
        return None, parts

    def _whole(self, record: bytes | None) -> bytes | None:
        return record

    def _chunk_item(self, c: Chunks, events, last: bool) -> tuple | None:
        """The large transaction's next part: nothing for an empty one but the last; a
        last one with no part before it is the whole record (or None)."""
        version = self.translator.keeper.schema_version
        if not last:
            if not events:
                return None
            c.chunk += 1
            return c.commit_ts, RecordPart(events, c.chunk, False), version
        if c.chunk:
            return c.commit_ts, RecordPart(events, c.chunk + 1, True), version
        return (c.commit_ts, record_head(c.commit_ts, len(events)) + events
                if events else None, version)

    def _chunking_note(self) -> str:
        return "writing its record in parts"

    def _pb_translator(self) -> PbTranslator:
        if self._pb is None or self._pb.translator is not self.translator:
            self._pb = PbTranslator(self.translator, ignore_schemas=self.settings.ignore_schemas,
                                    tz=self.settings.tzinfo())
        return self._pb
