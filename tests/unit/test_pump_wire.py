"""tidb_binlog.pump.wire: hand-built response bytes equal protobuf's serialization."""

from __future__ import annotations

import pytest
from google.protobuf.message import DecodeError
from hypothesis import given
from hypothesis import strategies as st

from tidb_binlog import binlog as bl
from tidb_binlog.proto import pump_pb2
from tidb_binlog.pump.wire import EMPTY_WRITE_RESP, pull_response_bytes, start_ts_of, varint

INT64 = st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1)


def proto_resp(commit_ts: int, start_ts: int, payload: bytes) -> bytes:
    return pump_pb2.PullBinlogResp(entity=pump_pb2.Entity(
        pos=pump_pb2.Pos(offset=commit_ts), payload=payload,
        meta=pump_pb2.Meta(startTs=start_ts, commitTs=commit_ts))).SerializeToString()


@given(commit_ts=INT64, start_ts=INT64, payload=st.binary(max_size=300))
def test_pull_response_bytes_equal_protobuf(commit_ts, start_ts, payload):
    assert pull_response_bytes(commit_ts, payload, start_ts) == \
        proto_resp(commit_ts, start_ts, payload)


@given(start_ts=st.integers(min_value=0, max_value=(1 << 63) - 1),
       commit_ts=st.integers(min_value=0, max_value=(1 << 63) - 1),
       value=st.binary(max_size=2000))
def test_start_ts_read_from_payload(start_ts, commit_ts, value):
    c = bl.commit(start_ts, commit_ts)
    c.prewrite_value = value
    payload = bl.encode(c)
    assert start_ts_of(payload) == start_ts
    assert pull_response_bytes(commit_ts, payload) == proto_resp(commit_ts, start_ts, payload)
    resp = pump_pb2.PullBinlogResp.FromString(pull_response_bytes(commit_ts, payload))
    assert (resp.entity.meta.startTs, resp.entity.pos.offset) == (start_ts, commit_ts)
    assert resp.entity.payload == payload


def test_start_ts_of_prewrite_fake_and_negative():
    assert start_ts_of(bl.encode(bl.prewrite(77, b"v"))) == 77   # tp 0 is written first
    assert start_ts_of(bl.encode(bl.fake(1 << 62))) == 1 << 62
    assert start_ts_of(bl.encode(bl.new_binlog(bl.BinlogType.COMMIT, -5, 3))) == -5
    assert start_ts_of(b"") == 0


def test_start_ts_of_out_of_order_fields_is_decoded_by_protobuf():
    # commit_ts (field 3) before start_ts (field 2): legal protobuf, not the fast path.
    payload = b"\x18\x09" + b"\x10\x07" + b"\x08\x01"
    assert start_ts_of(payload) == 7 == bl.Binlog.FromString(payload).start_ts


@pytest.mark.parametrize("garbage", [b"\x08\x01\x10", b"\x10\xff\xff", b"\x12\x05ab"])
def test_start_ts_of_malformed_payload_raises_decode_error(garbage):
    with pytest.raises(DecodeError):
        start_ts_of(garbage)


def test_varint_and_empty_write_response():
    assert varint(0) == b"\x00" and varint(300) == b"\xac\x02"
    assert varint(-1) == b"\xff" * 9 + b"\x01"
    assert EMPTY_WRITE_RESP == pump_pb2.WriteBinlogResp().SerializeToString()
