"""Which upstream errors the workloads retry: decided by type and ``retryable``, not text."""

from __future__ import annotations

import pytest

from tidb_binlog import errors
from tidb_binlog.upstream.workload import retryable


@pytest.mark.parametrize("err, again", [
    (errors.TxnConflict("deadlock", code=1213), True),
    (errors.TxnConflict("lock wait timeout", code=1205), True),
    (errors.PumpUnavailable("no pump took the prewrite"), True),
    (errors.SchemaChanged("information schema is changed"), True),
    (errors.UpstreamError("duplicate from the random keys", code=1062), True),
    (errors.UpstreamError("a concurrent DDL dropped the column", code=1054), True),
    (errors.DDLNotRecorded("undone", undone=True), True),
    (errors.DDLNotRecorded("not undone", undone=False), False),
    (errors.UpstreamError("prewrite too large"), False),  # code None: not a pump outage
    (errors.UpstreamError("syntax", code=1064), False),
    (errors.UpstreamSchemaError("unknown table"), False),
])
def test_retryable(err, again):
    assert retryable(err) is again
