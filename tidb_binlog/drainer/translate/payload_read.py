"""How a schema keeper reads a Commit binlog's payload: whole, in place in chunks
(:func:`translate_or_chunk`), or from a referenced binlog's source through a window of
:data:`REF_WINDOW_BYTES` (:class:`RefSource`, what :meth:`SchemaAt.open_payload
<tidb_binlog.drainer.translate.schema_at.SchemaAt.open_payload>` hands out).

:data:`REF_WINDOW_BYTES` is read from this module at each call (tests narrow it here).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from tidb_binlog import binlog as bl
from tidb_binlog.binlog_ref import BinlogRef, ByteSource, is_ref
from tidb_binlog.drainer.apply.dml import Txn
from tidb_binlog.drainer.pipeline.gate import PipelineReset
from tidb_binlog.drainer.translate import wire as _wire
from tidb_binlog.drainer.translate.txn import Translator
from tidb_binlog.drainer.translate.wire import WirePrewrite
from tidb_binlog.errors import InvalidArgument, UnavailableError

__all__ = ["REF_WINDOW_BYTES", "RefSource", "translate_or_chunk", "whole_payload"]

# The window a keeper reads a referenced binlog through (pump -> keeper, one Ray call a
# window while it walks the prewrite value; a chunk's rows are read by span)
REF_WINDOW_BYTES = 8 << 20


def translate_or_chunk(translator: Translator, payload, max_rows: int, *,
                       drop: Callable[[WirePrewrite], bool] | None = None
                       ) -> tuple[Txn | None, Iterator | None]:
    """One Commit binlog's payload as ``(txn, None)``, or, when it may hold more than
    ``max_rows`` row changes, ``(None, chunks)``: :meth:`Translator.translate_chunks`
    over the payload read in place (translate/wire.py: no Binlog or PrewriteValue
    message, no copy of its prewrite_value; the chunks hold the payload and the rows'
    offsets only). What every keeper that streams large transactions does first.

    ``payload``: the bytes (or a view of them), or a
    :class:`~tidb_binlog.binlog_ref.ByteSource` over them (a referenced binlog the
    keeper opened, :meth:`SchemaAt.open_payload
    <tidb_binlog.drainer.translate.schema_at.SchemaAt.open_payload>`): then the binlog
    is walked through a window of :data:`REF_WINDOW_BYTES` and each chunk's rows read
    by range, so the chunks hold the source, the rows' offsets and one window, never
    the payload. One that does not chunk (small for a reference, a DDL) is read whole
    from the source.

    ``drop``: asked about a transaction that chunks, with its prewrite value walked
    (loop control's verdict, ``RowKeeper._open``); True: ``(None, None)``, none of
    its rows decoded. The chunks then reuse that walk."""
    if is_ref(payload):
        raise InvalidArgument(f"a BinlogRef ({payload}) reached translate_or_chunk unopened: "
                              "the keeper opens it first (SchemaAt.open_payload)")
    # None from the reader: small, or not a well-formed binlog, which the protobuf parse
    # of the whole payload reports as it always did
    wire = _wire.read_large(payload, 4 * max_rows, REF_WINDOW_BYTES)
    if wire is not None and translator.may_exceed(wire, max_rows):
        if drop is None:
            return None, translator.translate_chunks(wire, max_rows)
        prewrite = WirePrewrite(wire.prewrite_value)  # the structure checked here
        if drop(prewrite):
            return None, None
        return None, translator.translate_chunks(wire, max_rows, prewrite=prewrite)
    del wire
    return translator.translate(bl.decode(whole_payload(payload))), None


def whole_payload(payload):
    """The payload's bytes: itself, or all of a :class:`~tidb_binlog.binlog_ref.ByteSource`
    read at once (a binlog that does not chunk: small, a DDL, malformed)."""
    if isinstance(payload, (bytes, bytearray, memoryview)):
        return payload
    return payload.read(0, payload.size)


class RefSource:
    """A referenced binlog's :class:`~tidb_binlog.binlog_ref.ByteSource` as the keeper
    reads it: counted in :attr:`SchemaAt.ref_stats`, and a pump that went away while
    it is read (:class:`~tidb_binlog.errors.UnavailableError`) is a
    :class:`PipelineReset`: the pipeline replays from its checkpoint, and pulls (and
    references) the transaction again once the pump is back."""

    __slots__ = ("_source", "_ref", "_stats", "size")

    def __init__(self, source: ByteSource, ref: BinlogRef, stats: dict):
        self._source, self._ref, self._stats = source, ref, stats
        self.size = ref.size

    def read(self, offset: int, n: int):
        try:
            data = self._source.read(offset, n)
        except UnavailableError as exc:
            raise PipelineReset(f"pump {self._ref.node_id} went away while the keeper read "
                                f"the transaction at commit_ts {self._ref.commit_ts} from it "
                                f"({exc}); replaying from the checkpoint") from exc
        stats = self._stats
        stats["reads"] += 1
        stats["bytes"] += len(data)
        return data
