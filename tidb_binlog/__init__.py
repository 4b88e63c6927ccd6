"""tidb-binlog-ray: TiDB Binlog (Pump + Drainer) rebuilt in Python.

This package is the pure core: formats, codecs, storage and algorithm kernels.
It never imports ``ray``; the Ray shells live in the top-level ``actors`` and
``cluster`` packages.
"""

__version__ = "0.1.0"
