"""Merge-by-key: every truth-table cell, PK changes, rendering, and a model check."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidb_binlog.drainer.apply.dml import DML, DMLType, TableSchema
from tidb_binlog.drainer.apply.merge_by_key import (
    merge_by_key,
    merge_statements,
    render_merged,
    split_key_changes,
)
from tidb_binlog.drainer.apply.sql import Statement
from tidb_binlog.errors import SchemaError

T = TableSchema.build("d", "t", ["id", "u", "v"], ["id"], {"uk_u": ("u",)})
INS, UPD, DEL = DMLType.INSERT, DMLType.UPDATE, DMLType.DELETE


def row(pk, v, u=None):
    return {"id": pk, "u": u, "v": v}


def ins(pk, v, u=None, schema=T):
    return DML(schema.database, schema.table, INS, row(pk, v, u), None, schema)


def upd(pk, old_v, new_v, new_pk=None, schema=T):
    new_pk = pk if new_pk is None else new_pk
    return DML(schema.database, schema.table, UPD, row(new_pk, new_v), row(pk, old_v), schema)


def dele(pk, v, schema=T):
    return DML(schema.database, schema.table, DEL, row(pk, v), None, schema)


def shape(dml):
    return (dml.tp, dml.values["v"], dml.old_values["v"] if dml.old_values else None)


# earlier changes for key 1, next change, expected single change, anomaly?
CELLS = [
    ("none+insert", [], ins(1, "n"), (INS, "n", None), 0),
    ("none+update", [], upd(1, "o", "n"), (UPD, "n", "o"), 0),
    ("none+delete", [], dele(1, "d"), (DEL, "d", None), 0),
    ("insert+insert", [ins(1, "a")], ins(1, "n"), (INS, "n", None), 1),
    ("insert+update", [ins(1, "a")], upd(1, "a", "n"), (INS, "n", None), 0),
    ("insert+delete", [ins(1, "a")], dele(1, "a"), (DEL, "a", None), 0),
    ("update+insert", [upd(1, "o1", "a")], ins(1, "n"), (INS, "n", None), 1),
    ("update+update", [upd(1, "o1", "a")], upd(1, "a", "n"), (UPD, "n", "o1"), 0),
    ("update+delete", [upd(1, "o1", "a")], dele(1, "a"), (DEL, "a", None), 0),
    ("delete+insert", [dele(1, "d0")], ins(1, "n"), (INS, "n", None), 0),
    ("delete+update", [dele(1, "d0")], upd(1, "o", "n"), (UPD, "n", "o"), 1),
    ("delete+delete", [dele(1, "d0")], dele(1, "d"), (DEL, "d", None), 1),
]


@pytest.mark.parametrize("name,earlier,nxt,expected,anomalies", CELLS,
                         ids=[c[0] for c in CELLS])
def test_truth_table_cell(name, earlier, nxt, expected, anomalies):
    batch = merge_by_key([*earlier, nxt])
    changes = batch.deletes + batch.upserts
    assert [shape(c) for c in changes] == [expected]
    assert batch.anomalies == anomalies
    assert (changes[0] in batch.deletes) == (expected[0] is DEL)


def test_update_update_update_keeps_the_very_first_old_image():
    batch = merge_by_key([upd(1, "o", "a"), upd(1, "a", "b"), upd(1, "b", "c")])
    assert [shape(c) for c in batch.upserts] == [(UPD, "c", "o")]


def test_pk_change_becomes_delete_plus_insert():
    out = split_key_changes([upd(1, "a", "b", new_pk=2), upd(3, "x", "y")])
    assert [(c.tp, c.values["id"]) for c in out] == [(DEL, 1), (INS, 2), (UPD, 3)]
    batch = merge_by_key([ins(1, "a"), upd(1, "a", "b", new_pk=2), upd(2, "b", "c", new_pk=1)])
    # 1: insert, delete, insert(c)  -> insert c;  2: insert b, delete -> delete
    assert [(c.tp, c.values["id"], c.values["v"]) for c in batch.upserts] == [(INS, 1, "c")]
    assert [(c.tp, c.values["id"]) for c in batch.deletes] == [(DEL, 2)]


def test_keys_keep_first_appearance_order():
    batch = merge_by_key([ins(3, "a"), ins(1, "b"), upd(3, "a", "c"), ins(2, "d")])
    assert [c.values["id"] for c in batch.upserts] == [3, 1, 2]


def test_render_single_pk():
    batch = merge_by_key([dele(5, "x"), dele(6, "y"), ins(1, "a"), upd(2, "b", "c"),
                          ins(3, "z")])
    assert render_merged(batch, batch_size=2) == [
        Statement("DELETE FROM `d`.`t` WHERE `id` IN (%s,%s)", (5, 6)),
        Statement("REPLACE INTO `d`.`t` (`id`,`u`,`v`) VALUES (%s,%s,%s),(%s,%s,%s)",
                  (1, None, "a", 2, None, "c")),
        Statement("REPLACE INTO `d`.`t` (`id`,`u`,`v`) VALUES (%s,%s,%s)", (3, None, "z")),
    ]


def test_render_composite_pk_and_column_groups():
    s = TableSchema.build("d", "c", ["a", "b", "x"], ["a", "b"])
    dmls = [DML("d", "c", DEL, {"a": 1, "b": 2, "x": 0}, None, s),
            DML("d", "c", DEL, {"a": 1, "b": 3, "x": 0}, None, s),
            DML("d", "c", INS, {"a": 2, "b": 2, "x": 9}, None, s),
            DML("d", "c", INS, {"a": 3, "b": 2}, None, s)]
    assert merge_statements(dmls) == [
        Statement("DELETE FROM `d`.`c` WHERE (`a` = %s AND `b` = %s) OR "
                  "(`a` = %s AND `b` = %s)", (1, 2, 1, 3)),
        Statement("REPLACE INTO `d`.`c` (`a`,`b`,`x`) VALUES (%s,%s,%s)", (2, 2, 9)),
        Statement("REPLACE INTO `d`.`c` (`a`,`b`) VALUES (%s,%s)", (3, 2)),
    ]
    assert merge_statements([]) == []


def test_errors():
    nopk = TableSchema.build("d", "n", ["a"], unique_keys={"u": ("a",)})
    with pytest.raises(SchemaError, match="`d`.`n` has no primary key"):
        merge_by_key([DML("d", "n", INS, {"a": 1}, None, nopk)])
    other = TableSchema.build("d", "t2", ["id", "u", "v"], ["id"])
    with pytest.raises(SchemaError, match="one table"):
        merge_by_key([ins(1, "a"), ins(2, "b", schema=other)])
    with pytest.raises(SchemaError, match="NULL in primary key"):
        merge_by_key([DML("d", "t", INS, {"id": None, "v": 1}, None, T)])
    with pytest.raises(SchemaError, match="lacks primary key column 'id'"):
        merge_by_key([DML("d", "t", INS, {"v": 1}, None, T)])
    with pytest.raises(SchemaError, match="at least one"):
        merge_by_key([])
    with pytest.raises(ValueError):
        render_merged(merge_by_key([ins(1, "a")]), batch_size=0)


# -- model check: merged apply == one-by-one apply ----------------------------

def gen_sequence(data, initial):
    """A valid upstream change stream over pk 0..5 and unique u in 0..4 (or NULL)."""
    state = dict(initial)
    dmls = []
    for _ in range(data.draw(st.integers(0, 25))):
        used_u = {r["u"] for r in state.values() if r["u"] is not None}
        free_pks = [k for k in range(6) if k not in state]
        op = data.draw(st.sampled_from(["ins", "upd", "del"]))
        if op == "ins" and free_pks or not state:
            if not free_pks:
                break
            pk = data.draw(st.sampled_from(free_pks))
            u = data.draw(st.sampled_from([None, *sorted(set(range(5)) - used_u)]))
            new = {"id": pk, "u": u, "v": data.draw(st.integers(0, 9))}
            dmls.append(DML("d", "t", INS, new, None, T))
            state[pk] = new
        elif op == "upd":
            pk = data.draw(st.sampled_from(sorted(state)))
            old = state[pk]
            new_pk = data.draw(st.sampled_from([pk, *free_pks]))
            u = data.draw(st.sampled_from(
                [None, *sorted((set(range(5)) - used_u) | {old["u"]} - {None})]))
            new = {"id": new_pk, "u": u, "v": data.draw(st.integers(0, 9))}
            dmls.append(DML("d", "t", UPD, new, old, T))
            del state[pk]
            state[new_pk] = new
        else:
            pk = data.draw(st.sampled_from(sorted(state)))
            dmls.append(DML("d", "t", DEL, state.pop(pk), None, T))
    return dmls, state


def replace_into(table, new):
    for pk in [k for k, r in table.items()
               if k == new["id"] or (new["u"] is not None and r["u"] == new["u"])]:
        del table[pk]
    table[new["id"]] = dict(new)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_property_merged_apply_equals_sequential_apply(data):
    initial = {}
    for pk in data.draw(st.sets(st.integers(0, 5), max_size=4)):
        initial[pk] = {"id": pk, "u": pk if data.draw(st.booleans()) else None, "v": 0}
    dmls, expected = gen_sequence(data, initial)
    if not dmls:
        return
    batch = merge_by_key(dmls)
    assert batch.anomalies == 0  # a valid stream never hits a (*) cell
    table = {k: dict(v) for k, v in initial.items()}
    for dml in batch.deletes:
        table.pop(dml.values["id"], None)
    for dml in batch.upserts:
        replace_into(table, dml.values)
    assert table == expected
    assert len({d.values["id"] for d in batch.deletes + batch.upserts}) == \
        len(batch.deletes) + len(batch.upserts)
