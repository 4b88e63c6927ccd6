"""Checkpoint formats (TiDB's JSON and savepoint TOML) and the Advancer kernel."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidb_binlog.drainer.apply.sql import Statement
from tidb_binlog.drainer.checkpoint.checkpoint import (
    Advancer,
    Checkpoint,
    create_statements,
    decode_json,
    decode_savepoint,
    encode_json,
    encode_savepoint,
    load_statement,
    resolve_initial_commit_ts,
    save_statement,
    start_commit_ts,
)
from tidb_binlog.errors import ConfigError, ProtocolError

# -- formats ------------------------------------------------------------------


def test_json_is_go_shaped():
    cp = Checkpoint(414529105591271429, False, 52)
    assert encode_json(cp) == (
        '{"consistent":false,"commitTS":414529105591271429,"ts-map":{},"schema-version":52}')
    cp = Checkpoint(7, True, 1, {"secondary-ts": 9, "primary-ts": 7})
    assert encode_json(cp) == ('{"consistent":true,"commitTS":7,'
                               '"ts-map":{"primary-ts":7,"secondary-ts":9},"schema-version":1}')


def test_json_decodes_what_tidb_wrote():
    # the row from TiDB's relay-log docs (no schema-version), and a null ts-map
    assert decode_json('{"consistent":false,"commitTS":414529105591271429,"ts-map":{}}') == \
        Checkpoint(414529105591271429, False, 0, {})
    assert decode_json(b'{"commitTS":5,"ts-map":null,"future-field":1}') == Checkpoint(5)
    assert decode_json("{}") == Checkpoint(0)


@pytest.mark.parametrize("text,match", [
    ("not json", "is not JSON"),
    ("[1,2]", "must be a JSON object, got list"),
    ('{"commitTS":"5"}', "'commitTS' must be an integer, got '5'"),
    ('{"commitTS":true}', "'commitTS' must be an integer"),
    ('{"commitTS":1.5}', "'commitTS' must be an integer"),
    ('{"consistent":1}', "'consistent' must be true or false"),
    ('{"schema-version":"x"}', "'schema-version' must be an integer"),
    ('{"ts-map":{"primary-ts":"x"}}', "'ts-map' must map names to integers"),
    ('{"ts-map":[1]}', "'ts-map' must map names to integers"),
])
def test_json_errors_say_what_and_how_to_recover(text, match):
    with pytest.raises(ProtocolError, match=match) as info:
        decode_json(text)
    assert "initial-commit-ts" in str(info.value)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.builds(Checkpoint, st.integers(0, 2**63 - 1), st.booleans(), st.integers(0, 2**40),
                 st.dictionaries(st.sampled_from(["primary-ts", "secondary-ts"]),
                                 st.integers(0, 2**63 - 1))))
def test_json_and_toml_round_trip(cp):
    assert decode_json(encode_json(cp)) == cp
    back = decode_savepoint(encode_savepoint(cp))
    assert back == Checkpoint(cp.commit_ts, cp.consistent, cp.schema_version)


def test_savepoint_toml():
    cp = Checkpoint(123, True, 4)
    assert encode_savepoint(cp) == "consistent = true\ncommitTS = 123\nschema-version = 4\n"
    # binlogctl generate_meta writes only commitTS
    assert decode_savepoint("commitTS = 99\n") == Checkpoint(99)


def test_savepoint_errors_name_key_and_file():
    with pytest.raises(ConfigError, match="savepoint file /x/savepoint is not valid TOML") as e:
        decode_savepoint("commitTS = = 1", path="/x/savepoint")
    assert e.value.path == "/x/savepoint"
    with pytest.raises(ConfigError, match="'commitTS' must be an integer") as e:
        decode_savepoint('commitTS = "1"', path="/x/savepoint")
    assert e.value.key == "commitTS"
    with pytest.raises(ConfigError, match="'consistent' must be true or false"):
        decode_savepoint("consistent = 1")


def test_initial_commit_ts():
    assert resolve_initial_commit_ts(-1, now_ts=555) == 555
    assert resolve_initial_commit_ts(0, now_ts=555) == 0
    assert resolve_initial_commit_ts(42, now_ts=555) == 42
    with pytest.raises(ConfigError, match="initial-commit-ts must be -1") as e:
        resolve_initial_commit_ts(-2, now_ts=555)
    assert e.value.key == "initial-commit-ts"


def test_start_commit_ts():
    assert start_commit_ts(None, 10) == Checkpoint(10)
    assert start_commit_ts(Checkpoint(0, True, 3), 10) == Checkpoint(10, True, 3)
    assert start_commit_ts(Checkpoint(7, False, 3), 10) == Checkpoint(7, False, 3)


def test_statements():
    assert create_statements() == [
        Statement("CREATE SCHEMA IF NOT EXISTS `tidb_binlog`", None),
        Statement("CREATE TABLE IF NOT EXISTS `tidb_binlog`.`checkpoint` "
                  "(clusterID BIGINT UNSIGNED PRIMARY KEY, checkPoint MEDIUMTEXT)", None)]
    assert save_statement(6791641053252586769, Checkpoint(5)) == Statement(
        "REPLACE INTO `tidb_binlog`.`checkpoint` VALUES (%s,%s)",
        (6791641053252586769, encode_json(Checkpoint(5))))
    assert load_statement(1, "s", "t") == Statement(
        "SELECT checkPoint FROM `s`.`t` WHERE clusterID = %s", (1,))


# -- Advancer -----------------------------------------------------------------


def test_advances_only_over_fully_acked_prefix():
    a = Advancer(Checkpoint(100))
    a.register(101)
    a.register(102, parts=2)
    a.register(103)
    assert a.commit_ts == 100 and a.pending == 3
    a.ack(103)
    assert a.commit_ts == 100
    a.ack(101)
    assert a.commit_ts == 101
    a.ack(102)
    assert a.commit_ts == 101  # one part of 102 still running
    a.ack(102)
    assert a.commit_ts == 103 and a.pending == 0


def test_fake_binlog_advances_once_earlier_items_are_acked():
    a = Advancer(Checkpoint(10))
    a.register_done(11)  # fake with nothing before it: immediate
    assert a.commit_ts == 11
    a.register(12)
    a.register_done(13)
    assert a.commit_ts == 11
    a.ack(12)
    assert a.commit_ts == 13


def test_schema_version_is_the_max_passed_and_never_decreases():
    a = Advancer(Checkpoint(10, schema_version=5))
    a.register(11, ddl=True, schema_version=7)
    a.register(12, schema_version=6)
    assert a.schema_version == 5
    a.ack(11)
    a.ack(12)
    assert a.checkpoint() == Checkpoint(12, False, 7)


def test_save_due_every_interval():
    a = Advancer(Checkpoint(10), save_interval_s=3.0, now_s=100.0)
    assert not a.due(200.0)  # nothing moved
    a.register_done(11)
    assert not a.due(102.9)
    assert a.due(103.0)
    cp = a.checkpoint()
    a.register_done(12)  # moves after the snapshot was taken
    a.saved(cp, now_s=103.5)
    assert not a.due(106.0)
    assert a.due(106.5)  # 12 is still unsaved


def test_save_due_at_once_after_a_ddl():
    a = Advancer(Checkpoint(10), now_s=100.0)
    a.register(11, ddl=True, schema_version=3)
    assert not a.due(100.1)  # the DDL is not committed yet
    a.ack(11)
    assert a.due(100.1)
    a.saved(a.checkpoint(), now_s=100.2)
    a.register_done(12)
    assert not a.due(100.3)


def test_final_is_consistent_only_when_drained():
    a = Advancer(Checkpoint(10))
    a.register(11)
    a.register(12)
    a.ack(11)
    assert a.final() == Checkpoint(11, False, 0)
    a.ack(12)
    assert a.final() == Checkpoint(12, True, 0)


def test_advancer_errors():
    a = Advancer(Checkpoint(10))
    with pytest.raises(ProtocolError, match="ascending commit_ts: 10 after 10"):
        a.register(10)
    a.register(12)
    with pytest.raises(ProtocolError, match="ascending commit_ts: 11 after 12"):
        a.register(11)
    with pytest.raises(ProtocolError, match="commit_ts 99, which has no pending"):
        a.ack(99)
    with pytest.raises(ProtocolError, match="ack of 2 part"):
        a.ack(12, parts=2)
    a.ack(12)
    with pytest.raises(ProtocolError, match="commit_ts 12, which has no pending"):
        a.ack(12)
    with pytest.raises(ValueError):
        a.register(13, parts=-1)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(0, 3), min_size=1, max_size=30), st.randoms(use_true_random=False))
def test_property_checkpoint_is_the_acked_prefix(parts_list, rnd):
    a = Advancer(Checkpoint(0))
    acks = []
    for i, parts in enumerate(parts_list, start=1):
        a.register(i, parts)
        acks += [i] * parts
    rnd.shuffle(acks)
    remaining = {i: p for i, p in enumerate(parts_list, start=1)}
    last = a.commit_ts
    for ts in acks:
        a.ack(ts)
        remaining[ts] -= 1
        prefix = 0
        for i in range(1, len(parts_list) + 1):
            if remaining[i]:
                break
            prefix = i
        assert a.commit_ts == prefix
        assert a.commit_ts >= last
        last = a.commit_ts
    assert a.commit_ts == len(parts_list) and a.final().consistent


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(0, 3), min_size=1, max_size=30), st.randoms(use_true_random=False),
       st.integers(1, 5))
def test_property_ack_parts_equals_one_ack_per_part(parts_list, rnd, chunk):
    """ack_parts (a worker's Send at once) leaves what ack per part leaves, after every Send."""
    one, bulk = Advancer(Checkpoint(0)), Advancer(Checkpoint(0))
    acks = []
    for i, parts in enumerate(parts_list, start=1):
        one.register(i, parts)
        bulk.register(i, parts)
        acks += [(i, ())] * parts
    rnd.shuffle(acks)
    for lo in range(0, len(acks), chunk):
        send = acks[lo:lo + chunk]
        for ts, _ in send:
            one.ack(ts)
        bulk.ack_parts(send)
        assert (bulk.commit_ts, bulk.pending) == (one.commit_ts, one.pending)
    assert bulk.final() == one.final()
    with pytest.raises(ProtocolError, match="which has no pending"):
        bulk.ack_parts([(1, ())])


# -- worker-count across a crash (checkpoint_store.decide_worker_layout) ------------------
def _layout(count, recorded, safe_until, progress, cp):
    from tidb_binlog.drainer.checkpoint.store import decide_worker_layout

    return decide_worker_layout(count, recorded, safe_until, progress, cp)


def test_same_worker_count_or_no_rows_keeps_the_progress_rows():
    crash = Checkpoint(100)
    d = _layout(4, 4, 0, {0: 150, 1: 120}, crash)
    assert (d.reset_progress, d.safe_mode) == (False, False)
    d = _layout(2, None, 0, {}, crash)                     # a fresh task
    assert (d.reset_progress, d.safe_mode, d.previous_count) == (False, False, None)


def test_a_changed_count_after_a_clean_stop_is_free():
    d = _layout(2, 4, 0, {0: 100, 1: 90, 3: 100}, Checkpoint(100, consistent=True))
    assert (d.reset_progress, d.safe_mode, d.safe_mode_until_ts) == (True, False, 0)


def test_a_changed_count_after_a_crash_replays_in_safe_mode_up_to_the_highest_row():
    d = _layout(2, 4, 0, {0: 150, 1: 120, 2: 100, 3: 180}, Checkpoint(100))
    assert (d.reset_progress, d.safe_mode, d.safe_mode_until_ts) == (True, True, 180)
    assert (d.previous_count, d.worker_count, d.checkpoint_ts) == (4, 2, 100)
    # rows written by a version that did not record the count: treated as changed
    assert _layout(4, None, 0, {0: 150}, Checkpoint(100)).safe_mode
    # no old row above the checkpoint: nothing in the window was applied
    d = _layout(2, 4, 0, {0: 100, 1: 90}, Checkpoint(100))
    assert (d.reset_progress, d.safe_mode) == (True, False)
    # no checkpoint saved at all: not consistent
    assert _layout(2, 4, 0, {0: 5}, None).safe_mode


def test_a_second_crash_inside_the_window_keeps_safe_mode_until_the_checkpoint_passes_it():
    d = _layout(2, 2, 180, {0: 130, 1: 110}, Checkpoint(120))
    assert (d.reset_progress, d.safe_mode, d.safe_mode_until_ts) == (False, True, 180)
    d = _layout(2, 2, 180, {0: 200, 1: 190}, Checkpoint(180))
    assert (d.safe_mode, d.safe_mode_until_ts) == (False, 0)
    # another change inside an open window: the old window still counts
    d = _layout(3, 2, 180, {0: 130, 1: 110}, Checkpoint(120))
    assert (d.reset_progress, d.safe_mode_until_ts) == (True, 180)


def test_status_counters_are_counted_when_the_checkpoint_passes_them():
    a = Advancer(Checkpoint(5, applied_rows=100, ddl_jobs=2, resets=1))
    a.register(10, 2, rows=7)
    a.register(20, 1, ddl=True)
    a.register(30, 1)
    a.add_rows(30, 3)                 # counted by a caller that registered through another
    assert (a.applied_rows, a.ddl_jobs) == (100, 2)  # nothing passed yet
    a.ack(30)
    a.ack(10)
    a.ack(10)
    assert (a.commit_ts, a.applied_rows, a.ddl_jobs) == (10, 107, 2)
    a.ack(20)
    cp = a.checkpoint()
    assert (cp.commit_ts, cp.applied_rows, cp.ddl_jobs, cp.resets) == (30, 110, 3, 1)
    a.register_done(40)
    a.add_rows(40, 0)                 # already passed: counted at once
    with pytest.raises(ProtocolError, match="not the item registered last"):
        a.add_rows(30, 1)


def test_status_counters_round_trip_after_tidbs_fields():
    cp = Checkpoint(7, False, 2, applied_rows=12, ddl_jobs=1, resets=3)
    text = encode_json(cp)
    assert text == ('{"consistent":false,"commitTS":7,"ts-map":{},"schema-version":2,'
                    '"applied-rows":12,"ddl-jobs":1,"resets":3}')
    back = decode_json(text)
    assert (back.applied_rows, back.ddl_jobs, back.resets) == (12, 1, 3)
    assert encode_json(Checkpoint(7, False, 2)) == \
        '{"consistent":false,"commitTS":7,"ts-map":{},"schema-version":2}'  # TiDB's bytes
