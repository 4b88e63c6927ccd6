"""Filters and routing of replicated changes: which tables, which events, which names.

Pure logic shared by the drainer's translators (every sink) and reparo:

- :mod:`.tables`: :class:`~.tables.TableFilter`, TiDB Binlog's do/ignore db/table
  matching (``~`` regex or exact, case-insensitive; allow list, then block list);
- :mod:`.events`: :class:`~.events.EventFilter`, ``binlog-filter-rule`` ignore-event /
  ignore-sql bound to ``table-migrate-rule`` sources;
- :mod:`.router`: :class:`~.router.Router`, ``table-migrate-rule`` source → target
  names for rows and DDLs (with :mod:`.ddl_names`, which reads a DDL's kind and names);
- :mod:`.selector`: the wildcard source patterns of ``table-migrate-rule``;
- :mod:`.rules`: :class:`~.rules.FilterSettings` (plain data in the task settings) and
  :class:`~.rules.TxnFilter` (what the keepers call).
"""
