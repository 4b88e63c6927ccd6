"""reparo's table filter: :class:`tidb_binlog.filter.tables.TableFilter` (TiDB's
``replicate-do-db``, ``replicate-do-table``, ``replicate-ignore-db``,
``replicate-ignore-table``; the rules are documented there), reading the object a DDL
changes from its SQL.

A file record's DDL carries only its ``use`` database and the query, so the object is
:func:`~tidb_binlog.reparo.decode.ddl_target` of the SQL (``use a; CREATE TABLE b.t``
changes ``b``; a database DDL gives ``(db, "")``), as TiDB's reparo does.
"""

from __future__ import annotations

from tidb_binlog.drainer.apply.dml import DDL
from tidb_binlog.filter.tables import TableFilter as _SharedTableFilter
from tidb_binlog.filter.tables import TableRule, compile_pattern
from tidb_binlog.reparo.decode import ddl_target

__all__ = ["TableFilter", "TableRule", "compile_pattern"]


class TableFilter(_SharedTableFilter):
    """The shared do/ignore matcher; a DDL is matched by the object its SQL names."""

    def ddl_object(self, ddl: DDL) -> tuple[str, str]:
        return ddl_target(ddl.sql, ddl.database)
