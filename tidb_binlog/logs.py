"""Structured process logs: every line says which node wrote it, transaction lines carry
their commit_ts, and no password gets through.

A pump or drainer process (a plain ``tidb-binlog pump`` or a Ray actor) calls
:func:`setup_logging` once with its node id: the pump's node id, or for a replication
task's actors the actor's name, i.e. the task and the actor's role (``orders-merger``,
``orders-worker-1``). One handler on the root logger then stamps ``node_id`` on every
record of the process (:class:`NodeFilter`, on the handler, so the records of every
module's logger get it) and writes either

- text (default): ``[time] [LEVEL] [logger] [node=pump-0] message commit_ts=...``, or
- JSON, one object a line: ``{"time", "level", "logger", "node_id", "message",
  "commit_ts"?, "error"?}`` for a log collector (``--log-format json`` on the command
  line, ``TIDB_BINLOG_LOG_FORMAT=json`` in the environment of actors). TiDB Binlog has
  no such option (its components log text); the name is ours.

A message about one transaction passes its commit_ts as a field:
``log.info("... %d", ts, extra=txn(ts))`` (orphan-commit resolution, checkpoints,
DDL, apply errors), so a collector can find every line of one transaction.

Passwords: the configs never print theirs (their secret fields are masked), and the
handler also masks ``password=...`` / ``"password": "..."`` / ``passwd`` values and the
password of a ``user:password@host`` URL in every line it writes (:func:`redact`): a
DSN or a driver's error text quoted in a message must not leak one either.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import time
from collections.abc import Callable

from tidb_binlog.errors import ConfigError

__all__ = ["setup_logging", "stamp_node", "NodeFilter", "JsonFormatter", "TextFormatter", "redact", "txn",
           "LOG_FORMATS", "FORMAT_ENV", "LEVEL_ENV"]

LOG_FORMATS = ("text", "json")
FORMAT_ENV = "TIDB_BINLOG_LOG_FORMAT"
"""Environment variable with the default log format (actors have no command line)."""
LEVEL_ENV = "TIDB_BINLOG_LOG_LEVEL"
"""Environment variable with the default log level of actors (default info)."""

_LEVELS = {"warn": logging.WARNING, "fatal": logging.CRITICAL}
_SECRET = re.compile(
    r"""(?P<key>\b(?:password|passwd|pwd)\b["']?\s*[:=]\s*)(?P<q>["']?)(?P<value>[^\s"',;)}]+)""",
    re.IGNORECASE)
_URL_PASSWORD = re.compile(r"(?P<head>\b[a-z][a-z0-9+.-]*://[^\s:/@]+:)(?P<value>[^\s@/]+)@",
                           re.IGNORECASE)
MASK = "******"


def redact(text: str) -> str:
    """``text`` with the value of every ``password=``/``"password": ``/``passwd``/``pwd``
    and the password of ``scheme://user:password@host`` replaced by ``******``."""
    text = _SECRET.sub(lambda m: f"{m['key']}{m['q']}{MASK}", text)
    return _URL_PASSWORD.sub(lambda m: f"{m['head']}{MASK}@", text)


def txn(commit_ts: int) -> dict:
    """``extra=`` of a message about the transaction at ``commit_ts``."""
    return {"commit_ts": int(commit_ts)}


class NodeFilter(logging.Filter):
    """Stamps ``node_id`` (a string, or a callable giving it when a record is written)
    on every record that has none."""

    def __init__(self, node_id: str | Callable[[], str]):
        super().__init__()
        self._node_id = node_id

    def node_id(self) -> str:
        try:
            return self._node_id() if callable(self._node_id) else self._node_id
        except Exception:  # noqa: BLE001 - a log line must never fail for its stamp
            return ""

    def filter(self, record: logging.LogRecord) -> bool:
        if not getattr(record, "node_id", None):
            record.node_id = self.node_id()
        return True


class TextFormatter(logging.Formatter):
    """``[time] [LEVEL] [logger] [node=<id>] message commit_ts=<ts>``, redacted."""

    def __init__(self):
        super().__init__("[%(asctime)s] [%(levelname)s] [%(name)s] %(node_tag)s%(message)s")

    def format(self, record: logging.LogRecord) -> str:
        node_id = getattr(record, "node_id", "")
        record.node_tag = f"[node={node_id}] " if node_id else ""  # none: the plain format
        line = super().format(record)
        commit_ts = getattr(record, "commit_ts", None)
        if commit_ts is not None:
            head, sep, rest = line.partition("\n")  # after the message, before a traceback
            line = f"{head} commit_ts={commit_ts}{sep}{rest}"
        return redact(line)


class JsonFormatter(logging.Formatter):
    """One JSON object a line (see the module doc), redacted."""

    def format(self, record: logging.LogRecord) -> str:
        doc = {"time": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(record.created))
                       + f".{int(record.msecs):03d}",
               "level": record.levelname, "logger": record.name,
               "node_id": getattr(record, "node_id", "") or "",
               "message": redact(record.getMessage())}
        commit_ts = getattr(record, "commit_ts", None)
        if commit_ts is not None:
            doc["commit_ts"] = commit_ts
        if record.exc_info:
            doc["error"] = redact(self.formatException(record.exc_info))
        return json.dumps(doc, ensure_ascii=False)


def stamp_node(node_id: str | Callable[[], str]) -> None:
    """Stamp ``node_id`` on the records of every handler of the root logger from now on
    (a process that learns its node id after its logging was set up: the pump)."""
    for handler in logging.getLogger().handlers:
        for old in [f for f in handler.filters if isinstance(f, NodeFilter)]:
            handler.removeFilter(old)
        handler.addFilter(NodeFilter(node_id))


class _OurHandler(logging.StreamHandler):
    """The handler :func:`setup_logging` installs (found again to be replaced)."""


def setup_logging(node_id: str | Callable[[], str] = "", *, fmt: str | None = None,
                  level: str | int | None = None, stream=None) -> logging.Handler | None:
    """Install the process's log handler on the root logger (replacing the one installed
    before). ``fmt``: ``text`` or ``json`` (default ``$TIDB_BINLOG_LOG_FORMAT``, else
    text); ``level``: a name (``info``, ``warn``, ...) or number (default
    ``$TIDB_BINLOG_LOG_LEVEL``, else info); ``stream``: default stderr. Returns the
    handler; None, changing nothing, when someone else's handler is on the root logger
    already (a test runner, a program embedding ours: as ``logging.basicConfig``).
    """
    fmt = (fmt or os.environ.get(FORMAT_ENV) or "text").lower()
    if fmt not in LOG_FORMATS:
        raise ConfigError(f"log format {fmt!r} is not one of {', '.join(LOG_FORMATS)} (--log-format "
                          f"or ${FORMAT_ENV})", key=FORMAT_ENV)
    root = logging.getLogger()
    if any(not isinstance(h, _OurHandler) for h in root.handlers):
        return None
    if level is None:
        level = os.environ.get(LEVEL_ENV) or "info"
    if isinstance(level, str):
        level = _LEVELS.get(level.lower(), getattr(logging, level.upper(), logging.INFO))
    out = _OurHandler(stream or sys.stderr)
    out.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    out.addFilter(NodeFilter(node_id))
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(out)
    root.setLevel(level)
    return out
