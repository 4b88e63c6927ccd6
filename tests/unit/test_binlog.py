"""binlog.Binlog as TiDB's encoder writes it: bytes, always-written fields, predicates."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidb_binlog import binlog
from tidb_binlog.binlog import BinlogType, MutationType
from tidb_binlog.errors import ProtocolError

INT64 = st.integers(-(2**63), 2**63 - 1)
POSITIVE_TS = st.integers(1, 2**63 - 1)


def test_reference_byte_example_commit_1_2():
    assert binlog.encode(binlog.commit(1, 2)) == bytes.fromhex("08 01 10 01 18 02 38 00 40 00")


def test_all_zero_binlog_still_writes_the_always_fields():
    # tp=Prewrite(0), start_ts=0, commit_ts=0, ddl_job_id=0, ddl_schema_state=0
    assert binlog.encode(binlog.probe()) == bytes.fromhex("08 00 10 00 18 00 38 00 40 00")


def test_rollback_and_fake_bytes():
    assert binlog.encode(binlog.rollback(5)) == bytes.fromhex("08 02 10 05 18 00 38 00 40 00")
    assert binlog.encode(binlog.fake(300)) == bytes.fromhex("08 02 10 ac 02 18 ac 02 38 00 40 00")


def test_prewrite_fields_are_written_in_field_number_order():
    b = binlog.prewrite(7, b"PV", prewrite_key=b"k", ddl_query=b"Q", ddl_job_id=3,
                        ddl_schema_state=5)
    assert binlog.encode(b) == bytes.fromhex(
        "08 00 10 07 18 00 22 01 6b 2a 02 50 56 32 01 51 38 03 40 05")


def test_prewrite_value_always_writes_schema_version():
    assert binlog.encode(binlog.new_prewrite_value(0)) == bytes.fromhex("08 00")
    assert binlog.encode(binlog.new_prewrite_value(2)) == bytes.fromhex("08 02")


def test_table_mutation_always_writes_table_id():
    assert binlog.encode(binlog.new_table_mutation(0)) == bytes.fromhex("08 00")


def test_table_mutation_layout_and_unpacked_sequence():
    m = binlog.new_table_mutation(
        45, inserted_rows=[b"\x01"], updated_rows=[b"\x02"], deleted_rows=[b"\x03"],
        sequence=[MutationType.INSERT, MutationType.UPDATE, MutationType.DELETE_ROW])
    # proto2 repeated enums are not packed: one tag per element (field 7 -> 0x38).
    assert binlog.encode(m) == bytes.fromhex(
        "08 2d 12 01 01 1a 01 02 32 01 03 38 00 38 01 38 04")


def test_prewrite_value_with_a_mutation():
    pv = binlog.new_prewrite_value(1, [binlog.new_table_mutation(0)])
    assert binlog.encode(pv) == bytes.fromhex("08 01 12 02 08 00")
    assert binlog.decode_prewrite_value(binlog.encode(pv)) == pv


def test_negative_int64_is_ten_bytes_like_go():
    b = binlog.commit(-1, 2)
    assert binlog.encode(b)[2:13] == bytes.fromhex("10 ff ff ff ff ff ff ff ff ff 01")


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])  # loaded hosts
@given(st.sampled_from([BinlogType.PREWRITE, BinlogType.COMMIT, BinlogType.ROLLBACK]),
       INT64, INT64, st.binary(max_size=40), st.binary(max_size=40), INT64,
       st.integers(-(2**31), 2**31 - 1))
def test_decode_encode_round_trip(tp, start_ts, commit_ts, key, value, job_id, state):
    b = binlog.new_binlog(tp, start_ts, commit_ts, prewrite_key=key, prewrite_value=value,
                          ddl_job_id=job_id, ddl_schema_state=state)
    back = binlog.decode(binlog.encode(b))
    assert back == b
    assert binlog.encode(back) == binlog.encode(b)


# -- predicates -------------------------------------------------------------


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])  # loaded hosts
@given(POSITIVE_TS)
def test_fake_is_fake_and_not_probe(ts):
    f = binlog.fake(ts)
    assert f.tp == BinlogType.ROLLBACK and f.start_ts == f.commit_ts == ts
    assert binlog.is_fake(f) and not binlog.is_probe(f) and not binlog.is_ddl(f)


def test_probe_is_probe_and_not_fake():
    p = binlog.probe()
    assert binlog.is_probe(p) and not binlog.is_fake(p)


@pytest.mark.parametrize("b", [
    binlog.commit(1, 2), binlog.rollback(9), binlog.prewrite(3, b""),
    binlog.commit(5, 6, ddl_query=b"create table t (a int)", ddl_job_id=4),
], ids=["commit", "rollback", "prewrite", "ddl-commit"])
def test_ordinary_binlogs_are_neither_fake_nor_probe(b):
    assert not binlog.is_fake(b) and not binlog.is_probe(b)


def test_is_ddl_follows_the_job_id():
    assert binlog.is_ddl(binlog.prewrite(3, b"", ddl_query=b"drop table t", ddl_job_id=12))
    assert not binlog.is_ddl(binlog.prewrite(3, b""))


# -- garbage ----------------------------------------------------------------


@pytest.mark.parametrize("payload", [
    b"", b"\xff", b"\x08", b"\x0a\x05ab", b"\x08\x01\x10", b"\xff" * 11, b"\x2a\x7f",
], ids=["empty", "bad-tag", "truncated-varint", "truncated-bytes", "no-value",
        "overlong-varint", "length-past-end"])
def test_decode_garbage_raises_protocol_error(payload):
    with pytest.raises(ProtocolError, match=f"{len(payload)} bytes"):
        binlog.decode(payload)


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])  # loaded hosts
@given(st.binary(max_size=64))
def test_decode_never_raises_anything_but_protocol_error(payload):
    try:
        binlog.decode(payload)
    except ProtocolError:
        pass


def test_decode_prewrite_value_garbage_raises_protocol_error():
    with pytest.raises(ProtocolError, match="prewrite value"):
        binlog.decode_prewrite_value(b"\x12\x09\x08")
