"""Build and parse ``binlog.Binlog`` messages exactly as TiDB's encoder does.

TiDB's Go code is generated with gogoproto ``nullable=false`` on some fields, so
its encoder writes them even when they are zero. With proto2 presence we get the
same bytes only if we set those fields explicitly; every constructor here does.
Fields written always:

- ``Binlog``: ``tp``, ``start_ts``, ``commit_ts``, ``ddl_job_id``, ``ddl_schema_state``
- ``PrewriteValue``: ``schema_version``
- ``TableMutation``: ``table_id``

Example: a Commit with start_ts=1, commit_ts=2 encodes as ``08 01 10 01 18 02 38 00 40 00``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from google.protobuf.message import DecodeError

from tidb_binlog.errors import ProtocolError
from tidb_binlog.proto import binlog_pb2

__all__ = [
    "Binlog",
    "BinlogType",
    "MutationType",
    "PrewriteValue",
    "TableMutation",
    "new_binlog",
    "prewrite",
    "commit",
    "rollback",
    "fake",
    "probe",
    "is_fake",
    "is_probe",
    "is_ddl",
    "new_table_mutation",
    "new_prewrite_value",
    "encode",
    "decode",
    "decode_prewrite_value",
]

Binlog = binlog_pb2.Binlog
PrewriteValue = binlog_pb2.PrewriteValue
TableMutation = binlog_pb2.TableMutation


class BinlogType:
    PREWRITE = binlog_pb2.Prewrite
    COMMIT = binlog_pb2.Commit
    ROLLBACK = binlog_pb2.Rollback
    PRE_DDL = binlog_pb2.PreDDL
    POST_DDL = binlog_pb2.PostDDL


class MutationType:
    INSERT = binlog_pb2.Insert
    UPDATE = binlog_pb2.Update
    DELETE_ID = binlog_pb2.DeleteID
    DELETE_PK = binlog_pb2.DeletePK
    DELETE_ROW = binlog_pb2.DeleteRow


def new_binlog(tp: int, start_ts: int, commit_ts: int = 0, *, prewrite_key: bytes | None = None,
               prewrite_value: bytes | None = None, ddl_query: bytes | None = None,
               ddl_job_id: int = 0, ddl_schema_state: int = 0) -> Binlog:
    """A Binlog with TiDB's always-written fields set."""
    b = Binlog(tp=tp, start_ts=start_ts, commit_ts=commit_ts,
               ddl_job_id=ddl_job_id, ddl_schema_state=ddl_schema_state)
    if prewrite_key is not None:
        b.prewrite_key = prewrite_key
    if prewrite_value is not None:
        b.prewrite_value = prewrite_value
    if ddl_query is not None:
        b.ddl_query = ddl_query
    return b


def prewrite(start_ts: int, prewrite_value: bytes, *, prewrite_key: bytes = b"",
             ddl_query: bytes | None = None, ddl_job_id: int = 0,
             ddl_schema_state: int = 0) -> Binlog:
    """The P-binlog TiDB writes before committing (DML or DDL)."""
    return new_binlog(BinlogType.PREWRITE, start_ts, 0, prewrite_key=prewrite_key,
                      prewrite_value=prewrite_value, ddl_query=ddl_query,
                      ddl_job_id=ddl_job_id, ddl_schema_state=ddl_schema_state)


def commit(start_ts: int, commit_ts: int, *, ddl_query: bytes | None = None,
           ddl_job_id: int = 0, ddl_schema_state: int = 0) -> Binlog:
    """The C-binlog TiDB writes after a successful commit (prewrite value cleared)."""
    return new_binlog(BinlogType.COMMIT, start_ts, commit_ts, ddl_query=ddl_query,
                      ddl_job_id=ddl_job_id, ddl_schema_state=ddl_schema_state)


def rollback(start_ts: int, *, ddl_query: bytes | None = None, ddl_job_id: int = 0,
             ddl_schema_state: int = 0) -> Binlog:
    """The C-binlog of an aborted transaction (commit_ts 0)."""
    return new_binlog(BinlogType.ROLLBACK, start_ts, 0, ddl_query=ddl_query,
                      ddl_job_id=ddl_job_id, ddl_schema_state=ddl_schema_state)


def fake(ts: int) -> Binlog:
    """A pump heartbeat: Rollback with start_ts == commit_ts == a fresh TSO."""
    return new_binlog(BinlogType.ROLLBACK, ts, ts)


def probe() -> Binlog:
    """The pump client's health probe: start_ts == commit_ts == 0."""
    return new_binlog(BinlogType.PREWRITE, 0, 0)


def is_fake(b: Binlog) -> bool:
    return b.start_ts == b.commit_ts and b.start_ts > 0


def is_probe(b: Binlog) -> bool:
    return b.start_ts == 0 and b.commit_ts == 0


def is_ddl(b: Binlog) -> bool:
    return b.ddl_job_id > 0


def new_table_mutation(table_id: int, *, inserted_rows: Iterable[bytes] = (),
                       updated_rows: Iterable[bytes] = (), deleted_rows: Iterable[bytes] = (),
                       sequence: Iterable[int] = ()) -> TableMutation:
    """A TableMutation with ``table_id`` always set."""
    m = TableMutation(table_id=table_id)
    m.inserted_rows.extend(inserted_rows)
    m.updated_rows.extend(updated_rows)
    m.deleted_rows.extend(deleted_rows)
    m.sequence.extend(sequence)
    return m


def new_prewrite_value(schema_version: int, mutations: Sequence[TableMutation] = ()) -> PrewriteValue:
    """A PrewriteValue with ``schema_version`` always set."""
    pv = PrewriteValue(schema_version=schema_version)
    pv.mutations.extend(mutations)
    return pv


def encode(message) -> bytes:
    """Marshal a message; fields are written in field-number order like Go's encoder."""
    return message.SerializeToString(deterministic=True)


def decode(payload: bytes) -> Binlog:
    """Parse a marshalled Binlog; malformed bytes raise ProtocolError."""
    b = Binlog()
    try:
        b.ParseFromString(payload)
    except DecodeError as exc:
        raise ProtocolError(f"malformed binlog payload ({len(payload)} bytes): {exc}") from exc
    if not b.HasField("tp"):
        # Go's nullable=false encoder always writes tp; its absence means garbage
        # that happened to parse (for instance an empty payload).
        raise ProtocolError(f"malformed binlog payload ({len(payload)} bytes): field tp missing")
    return b


def decode_prewrite_value(payload: bytes) -> PrewriteValue:
    pv = PrewriteValue()
    try:
        pv.ParseFromString(payload)
    except DecodeError as exc:
        raise ProtocolError(f"malformed prewrite value ({len(payload)} bytes): {exc}") from exc
    return pv
