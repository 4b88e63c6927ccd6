"""binlogctl (TiDB Binlog's operations tool) as plain code: commands, lag, tables, encrypt.

- :mod:`~tidb_binlog.binlogctl.commands`: :class:`Binlogctl` runs one ``-cmd``
  against a registry client and the nodes' HTTP APIs.
- :mod:`~tidb_binlog.binlogctl.report`: lag of pumps and drainers, node tables.
- :mod:`~tidb_binlog.binlogctl.encrypt`: TiDB Binlog's ``encrypted_password`` format.
- :mod:`~tidb_binlog.binlogctl.flags`: the flags (``-cmd`` and ``--cmd``).

The console command is ``tidb-binlog binlogctl`` (``tidb_binlog/cli/binlogctl.py``),
which joins Ray and passes the registry actor's client in; nothing here imports Ray.
"""

from tidb_binlog.binlogctl.commands import COMMANDS, Binlogctl, Options
from tidb_binlog.binlogctl.encrypt import decrypt, encrypt

__all__ = ["COMMANDS", "Binlogctl", "Options", "encrypt", "decrypt"]
