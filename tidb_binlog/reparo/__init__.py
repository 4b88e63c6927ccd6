"""reparo: restore a drainer's file-sink directory (pb binlog files) into MySQL/TiDB, or print it.

TiDB Binlog's ``reparo``, in parts that others reuse:

- :mod:`.decode` (pure): pb ``Binlog`` bytes → the drainer's :class:`~tidb_binlog.drainer.
  apply.dml.Txn` (DMLs with column values, or a DDL); the file sink's translation reversed;
  a record too large to parse whole is read in place (:class:`~.decode.LargeRecord`;
  README.md in this folder, "Large records");
- :mod:`.filter` (pure): :class:`~.filter.TableFilter`, TiDB's replicate-do/ignore
  db/table rules (``~`` = regex, else exact; case-insensitive; allow list, then block list);
- :mod:`.printer` (pure): what ``dest-type = "print"`` prints;
- :mod:`.source` (reads files): which segments a ``[start, stop]`` range needs, the
  records in range, damage reported with file and offset;
- :mod:`.apply` (MySQL): decoded transactions through the drainer's dispatcher and loader;
- :mod:`.runner`: :func:`~.runner.run_reparo`, the whole restore for one config.

The command is ``tidb-binlog reparo`` (``tidb_binlog/cli/reparo.py``); its file is
reparo.toml (``tidb_binlog/config/reparo.py``). Nothing here imports Ray. The package
imports nothing on its own: import the module you need.
"""
