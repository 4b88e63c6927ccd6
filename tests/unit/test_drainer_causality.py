"""Row keys, the causality kernel and the deterministic router."""

from __future__ import annotations

import pickle
import subprocess
import sys
import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidb_binlog.drainer.apply.causality import (
    CONFLICT,
    Causality,
    image_keys,
    routing_key,
    row_keys,
    stable_hash,
)
from tidb_binlog.drainer.apply.dml import DML, DMLType, TableSchema
from tidb_binlog.drainer.apply.routing import Router
from tidb_binlog.errors import SchemaError

T = TableSchema.build("d", "t", ["id", "u", "v"], ["id"], {"uk_u": ("u",)})
NOKEY = TableSchema.build("d", "n", ["a", "b"])


def ins(values, schema=T):
    return DML(schema.database, schema.table, DMLType.INSERT, values, None, schema)


def upd(old, new, schema=T):
    return DML(schema.database, schema.table, DMLType.UPDATE, new, old, schema)


def test_keys_are_table_qualified_per_unique_key():
    assert row_keys(ins({"id": 1, "u": "x", "v": 0})) == [
        "`d`.`t`('id',)=(1,)", "`d`.`t`('u',)=('x',)"]
    other = TableSchema.build("d", "t2", ["id", "u", "v"], ["id"])
    assert row_keys(ins({"id": 1, "u": "x", "v": 0}, other)) == ["`d`.`t2`('id',)=(1,)"]


def test_composite_key_strings_are_pinned():
    """Routing hashes these strings: they must not change between releases."""
    both = TableSchema.build("d", "c", ["a", "b", "v"], ["a", "b"])
    assert row_keys(ins({"a": 1, "b": "x", "v": 0}, both)) == ["`d`.`c`('a', 'b')=(1, 'x')"]
    assert row_keys(ins({"a": 1, "b": None, "v": 0}, both))[0].startswith("`d`.`c`*=")


def test_null_unique_key_is_not_a_key():
    assert row_keys(ins({"id": 1, "u": None, "v": 0})) == ["`d`.`t`('id',)=(1,)"]


def test_update_adds_old_image_keys_deduplicated():
    keys = row_keys(upd({"id": 1, "u": "x", "v": 0}, {"id": 2, "u": "x", "v": 0}))
    assert keys == ["`d`.`t`('id',)=(2,)", "`d`.`t`('u',)=('x',)", "`d`.`t`('id',)=(1,)"]


def test_table_without_usable_key_hashes_all_values():
    values = {"a": 1, "b": b"\xff"}
    crc = zlib.crc32(repr((1, b"\xff")).encode())
    assert row_keys(ins(values, NOKEY)) == [f"`d`.`n`*={crc:08x}"]
    # an update of a keyless row: new and old image hashes
    keys = row_keys(upd(values, {"a": 2, "b": b"\xff"}, NOKEY))
    assert len(keys) == 2 and keys[0] != keys[1]
    # a keyed table whose only key is NULL in this row falls back too
    schema = TableSchema.build("d", "t", ["u", "v"], unique_keys={"uk": ("u",)})
    assert image_keys(schema, "d", "t", {"u": None, "v": 1})[0].startswith("`d`.`t`*=")


def test_routing_key_is_first_key_of_new_image():
    dml = upd({"id": 1, "u": "x", "v": 0}, {"id": 2, "u": "y", "v": 0})
    assert routing_key(dml) == "`d`.`t`('id',)=(2,)"


def test_keys_need_a_schema():
    with pytest.raises(SchemaError, match="keys need the table's unique keys"):
        row_keys(DML("d", "t", DMLType.INSERT, {"id": 1}))


def test_stable_hash_is_crc32_and_process_independent():
    assert stable_hash("abc") == 0x352441C2
    key = row_keys(ins({"id": 7, "u": "é", "v": 0}))[1]
    code = ("from tidb_binlog.drainer.apply.causality import stable_hash; import sys; "
            "print(stable_hash(sys.argv[1]))")
    other = subprocess.run([sys.executable, "-c", code, key], capture_output=True, text=True,
                           check=True, env={"PYTHONHASHSEED": "12345"})
    assert int(other.stdout) == stable_hash(key)


def test_causality_groups_chain_and_conflict():
    c = Causality(worker_count=4)
    g1 = c.add(["k3", "k4"])  # update id 3 -> 4
    assert g1 == "k3"
    assert c.add(["k5", "k2"]) == "k5"
    assert c.add(["k3"]) == g1  # same group, same worker: no flush needed
    assert c.add(["k4", "k9"]) == g1  # joins the group, k9 recorded in it
    assert c.group_of("k9") == g1
    assert c.detect_conflict(["k9", "k2"])
    assert c.add(["k9", "k2"]) is CONFLICT  # ties two groups together
    assert c.group_of("k2") == "k5" and len(c) == 5  # nothing recorded
    c.reset()
    assert len(c) == 0
    assert c.add(["k9", "k2"]) == "k9"


def test_causality_worker_assignment():
    c = Causality(worker_count=3)
    assert c.assign(["a"]) == stable_hash("a") % 3
    assert c.assign(["b", "a"]) == stable_hash("a") % 3  # joins a's group
    c.add(["z"])
    assert c.assign(["a", "z"]) is CONFLICT
    with pytest.raises(ValueError):
        Causality(0)
    with pytest.raises(ValueError):
        c.add([])


def test_router_is_a_function_of_the_row():
    r = Router(worker_count=8)
    dml = ins({"id": 1, "u": "x", "v": 0})
    assert r.route(dml) == stable_hash(routing_key(dml)) % 8


def test_router_conflict_then_flush():
    r = Router(worker_count=1000)
    # find two pks on different workers
    a, b = 1, next(i for i in range(2, 100) if
                   r.worker_for_key(f"`d`.`t`('id',)=({i},)") !=
                   r.worker_for_key("`d`.`t`('id',)=(1,)"))
    wa = r.route(ins({"id": a, "u": "x", "v": 0}))
    assert r.route(ins({"id": b, "u": "y", "v": 0})) != wa
    # update b -> takes unique value x, held by a's worker
    move = upd({"id": b, "u": "y", "v": 0}, {"id": b, "u": "x", "v": 0})
    assert r.route(move) is CONFLICT
    assert r.conflicts == 1
    r.flushed()
    assert len(r) == 0
    assert r.route(move) == r.worker_for_key(f"`d`.`t`('id',)=({b},)")
    with pytest.raises(ValueError):
        Router(0)


def test_conflict_sentinel_survives_pickle():
    assert pickle.loads(pickle.dumps(CONFLICT)) is CONFLICT
    assert repr(CONFLICT) == "CONFLICT"


# -- properties ---------------------------------------------------------------

rows = st.lists(st.lists(st.integers(0, 12).map(lambda i: f"k{i}"), min_size=1, max_size=3,
                         unique=True), max_size=60)


def dispatch(kernel, assign, sequence):
    """Run a row sequence with flush-on-conflict; returns [(window, worker)] per row."""
    window = 0
    placed = []
    for keys in sequence:
        worker = assign(keys)
        if worker is CONFLICT:
            window += 1
            (kernel.reset if isinstance(kernel, Causality) else kernel.flushed)()
            worker = assign(keys)
            assert worker is not CONFLICT, "a row conflicts right after a flush"
        placed.append((window, worker))
    return placed


def assert_rows_sharing_a_key_share_a_worker(sequence, placed):
    for i, ki in enumerate(sequence):
        for j in range(i):
            if placed[i][0] == placed[j][0] and set(ki) & set(sequence[j]):
                assert placed[i][1] == placed[j][1], (sequence[j], sequence[i])


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows, st.integers(1, 5))
def test_property_causality_never_splits_a_key_within_a_window(sequence, workers):
    c = Causality(workers)
    placed = dispatch(c, c.assign, sequence)
    assert_rows_sharing_a_key_share_a_worker(sequence, placed)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows, st.integers(1, 5), st.data())
def test_property_router_is_safe_and_restart_stable(sequence, workers, data):
    r = Router(workers)
    placed = dispatch(r, r.route_keys, sequence)
    assert_rows_sharing_a_key_share_a_worker(sequence, placed)
    assert [w for _, w in placed] == [stable_hash(k[0]) % workers for k in sequence]
    # a restarted task replays a suffix: every row lands where it did before
    start = data.draw(st.integers(0, len(sequence)))
    again = Router(workers)
    replayed = dispatch(again, again.route_keys, sequence[start:])
    assert [w for _, w in replayed] == [w for _, w in placed[start:]]
