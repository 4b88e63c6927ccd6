"""Helpers of the Spark tests (imported as ``spark_helpers``, like tests/ray's helpers)."""

from __future__ import annotations

from tidb_binlog.config.spark import DatabaseConfig


def db_config(server) -> DatabaseConfig:
    """The ``[upstream]``/``[downstream]`` section for a throwaway MariaDB server."""
    p = server.params()
    return DatabaseConfig(host=p["host"], port=p["port"], user=p["user"],
                          password=p["password"] or "")
