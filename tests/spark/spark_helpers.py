"""Helpers of the Spark tests (imported as ``spark_helpers``, like tests/ray's helpers)."""

from __future__ import annotations

from collections import Counter

from tidb_binlog.config.spark import DatabaseConfig


def db_config(server) -> DatabaseConfig:
    """The ``[upstream]``/``[downstream]`` section for a throwaway MariaDB server."""
    p = server.params()
    return DatabaseConfig(host=p["host"], port=p["port"], user=p["user"],
                          password=p["password"] or "")


def _norm(v):
    return None if v is None else str(v).rstrip(" ")


def table_rows(conn, db: str, table: str):
    """``(column names, Counter of rows as normalised text)`` of a server's table: what an
    image must equal, whatever the value types (CHAR padding dropped)."""
    with conn.cursor() as cur:
        cur.execute(f"SELECT * FROM `{db}`.`{table}`")
        cols = [d[0] for d in cur.description]
        return cols, Counter(tuple(_norm(v) for v in r) for r in cur.fetchall())


def image_rows(image: list[dict], cols: list[str]):
    """A Parquet image's rows (``to_pylist()``) in :func:`table_rows`' form."""
    return Counter(tuple(_norm(r.get(c)) for c in cols) for r in image)
