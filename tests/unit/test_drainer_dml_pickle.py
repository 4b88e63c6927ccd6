"""DML pickles as a plain tuple (it crosses two actor hops per row) and comes back whole."""

from __future__ import annotations

import dataclasses
import pickle

import pytest

from tidb_binlog.drainer.apply.dml import DML, DMLType, TableSchema, Txn

T = TableSchema.build("db", "t", ["id", "u", "v"], ["id"], {"uu": ("u",)})


@pytest.mark.parametrize("dml", [
    DML("db", "t", DMLType.INSERT, {"id": 1, "u": None, "v": b"\x00"}, None, T),
    DML("db", "t", DMLType.UPDATE, {"id": 2, "u": 3, "v": "x"}, {"id": 1, "u": 3, "v": "y"}, T),
    DML("db", "t", DMLType.DELETE, {"id": 1}, None, None),
])
def test_every_kind_round_trips_frozen(dml):
    back = pickle.loads(pickle.dumps(dml, protocol=5))
    assert back == dml and type(back) is DML
    assert (back.tp, back.values, back.old_values, back.schema) == \
        (dml.tp, dml.values, dml.old_values, dml.schema)
    with pytest.raises(dataclasses.FrozenInstanceError):
        back.table = "other"


def test_a_batch_shares_one_schema_object_after_the_hop():
    txn = Txn(7, tuple(DML("db", "t", DMLType.INSERT, {"id": i}, None, T) for i in range(50)))
    back = pickle.loads(pickle.dumps([(7, txn, 1)], protocol=5))[0][1]
    assert back == txn
    assert len({id(d.schema) for d in back.dmls}) == 1  # memoized, not 50 copies
