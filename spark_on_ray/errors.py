"""Errors of the Spark jobs, in the project's exception tree (``tidb_binlog.errors``).

Both pickle round trip (Ray re-raises errors in other processes) through
:class:`~tidb_binlog.errors.BinlogError`'s ``__reduce__``.
"""

from __future__ import annotations

from tidb_binlog.errors import BinlogError

__all__ = ["SparkSetupError", "SparkJobError"]


class SparkSetupError(BinlogError):
    """Spark cannot start here: no Java, no JDBC jar, a size taking every CPU."""


class SparkJobError(BinlogError):
    """A job's input is wrong (unreachable server, missing table, differing columns)."""

    _fields = ("where",)
