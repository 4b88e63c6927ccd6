"""binlogctl's commands (TiDB Binlog's ``binlogctl``) over any registry client.

TiDB's binlogctl talks to PD's etcd; ours talks to the registry actor through a
:class:`tidb_binlog.node.RegistryClient` (the CLI joins Ray and passes one in;
unit tests pass ``tidb_binlog.testing.registry.InMemoryRegistry``). Pause and
offline go to the node's own HTTP API, as in TiDB (``PUT /state/{id}/{action}``),
so the node itself walks its state machine (a pump closes only once every
non-offline drainer consumed everything it stores).

=================== ===========================================================================
``pumps``            table of pump records (offline ones only with ``-show-offline-nodes``),
                     with each online pump's lag behind the TSO
``drainers``         table of drainer records with each checkpoint's lag behind the TSO and
                     behind every non-offline pump
``update-pump``      write ``-state`` into the record of ``-node-id`` as is (forced: any state),
``update-drainer``   for a node that is not running (a running one writes its own state back
                     with its next heartbeat; binlogctl warns)
``pause-pump``       ``PUT /state/<id>/pause`` on the node's HTTP address (``online`` →
``pause-drainer``    ``pausing`` → ``paused``; a pump is ``pausing`` until the transactions
                     in flight on it have their Commit or Rollback)
``offline-pump``     ``PUT /state/<id>/close`` (``online`` → ``closing`` → ``offline``)
``offline-drainer``
``generate_meta``    ``<data-dir>/savepoint`` with ``commitTS = <TSO now>`` (times as comments)
``encrypt``          ``-text`` encrypted for ``encrypted_password`` (needs no registry)
=================== ===========================================================================

The node's HTTP address is its registered address with the port + 1 (both the
pump and the drainer serve HTTP there unless started with ``--status-addr``),
or ``--status-addr``. With ``--wait S`` a pause/offline waits up to S seconds
for the record to reach ``paused`` / ``offline``.
"""

from __future__ import annotations

import json
import ssl
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from tidb_binlog.binlogctl import report
from tidb_binlog.binlogctl.encrypt import encrypt
from tidb_binlog.errors import ConfigError, StateError, UnavailableError
from tidb_binlog.http_server import derive_status_addr
from tidb_binlog.node import DRAINER, OFFLINE, PAUSED, PUMP, STATES, NodeStatus

__all__ = ["COMMANDS", "Options", "Binlogctl", "http_put", "savepoint_text"]

# -cmd values (TiDB's names) -> (node kind, action) where it applies.
COMMANDS = ("pumps", "drainers", "update-pump", "update-drainer", "pause-pump", "pause-drainer",
            "offline-pump", "offline-drainer", "generate_meta", "encrypt")
_ACTIONS = {"pause-pump": (PUMP, "pause"), "pause-drainer": (DRAINER, "pause"),
            "offline-pump": (PUMP, "close"), "offline-drainer": (DRAINER, "close")}
_UPDATES = {"update-pump": PUMP, "update-drainer": DRAINER}
_FINAL_STATE = {"pause": PAUSED, "close": OFFLINE}


@dataclass(frozen=True)
class Options:
    """Parsed flags (TiDB's names; ``status_addr`` and ``wait_s`` are ours)."""

    cmd: str = "pumps"
    node_id: str = ""
    state: str = ""
    show_offline_nodes: bool = False
    data_dir: str = "binlog_position"
    time_zone: str = ""
    text: str = ""
    status_addr: str = ""
    wait_s: float = 0.0

    def needs_registry(self) -> bool:
        return self.cmd != "encrypt"


def http_put(url: str, timeout_s: float, ssl_context: ssl.SSLContext | None = None
             ) -> tuple[int, str]:  # fmt: skip
    """PUT ``url``; ``(status code, body)``; OSError when nothing answers."""
    req = urllib.request.Request(url, method="PUT", data=b"")
    try:
        with urllib.request.urlopen(req, timeout=timeout_s, context=ssl_context) as resp:
            return resp.status, resp.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")


def savepoint_text(commit_ts: int, time_zone: str = "") -> str:
    """TiDB's ``generate_meta`` file: ``commitTS = <ts>``; with a time zone, the time
    of the ts in UTC and in that zone as TOML comments (TiDB appends them as bare
    lines, which a TOML reader refuses; comments keep the file loadable)."""
    text = f"commitTS = {commit_ts}\n"
    if time_zone:
        try:
            zone = ZoneInfo(time_zone)
        except (ZoneInfoNotFoundError, ValueError):
            raise ConfigError(f"-time-zone {time_zone!r} is not a known time zone (e.g. "
                              "Asia/Shanghai, UTC)", key="time-zone") from None
        text += f"# {report.format_ts_time(commit_ts)}\n"
        text += f"# {report.format_ts_time(commit_ts, zone)}\n"
    return text


class Binlogctl:
    """Runs one command. ``registry`` is a callable returning the registry client
    (so ``encrypt`` never joins Ray); ``put`` is :func:`http_put`'s signature."""

    def __init__(self, registry: Callable[[], object], *, out: TextIO | None = None,
                 err: TextIO | None = None, put=http_put,
                 ssl_context: ssl.SSLContext | None = None, http_timeout_s: float = 10.0,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep):
        self._registry_factory = registry
        self._registry = None
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self._put = put
        self._ssl = ssl_context
        self._http_timeout_s = http_timeout_s
        self._clock = clock
        self._sleep = sleep

    @property
    def registry(self):
        if self._registry is None:
            self._registry = self._registry_factory()
        return self._registry

    def run(self, opts: Options) -> int:
        if opts.cmd not in COMMANDS:
            raise ConfigError(f"-cmd {opts.cmd!r} is unknown; expected one of "
                              f"{', '.join(COMMANDS)}", key="cmd")
        if opts.cmd == "encrypt":
            return self.encrypt(opts.text)
        if opts.cmd == "pumps":
            return self.show(PUMP, opts.show_offline_nodes)
        if opts.cmd == "drainers":
            return self.show(DRAINER, opts.show_offline_nodes)
        if opts.cmd in _UPDATES:
            return self.update_state(_UPDATES[opts.cmd], opts.node_id, opts.state)
        if opts.cmd in _ACTIONS:
            kind, action = _ACTIONS[opts.cmd]
            return self.apply_action(kind, opts.node_id, action, status_addr=opts.status_addr,
                                     wait_s=opts.wait_s)
        return self.generate_meta(opts.data_dir, opts.time_zone)

    # -- commands ------------------------------------------------------------------------
    def encrypt(self, text: str) -> int:
        if not text:
            raise ConfigError("-cmd encrypt needs -text <the password to encrypt>", key="text")
        print(encrypt(text), file=self.out)
        return 0

    def show(self, kind: str, show_offline: bool) -> int:
        reg = self.registry
        now_ts = reg.get_ts()
        pumps = reg.nodes(PUMP)
        if kind == PUMP:
            header, rows = report.pump_rows(pumps, now_ts, show_offline=show_offline)
        else:
            header, rows = report.drainer_rows(reg.nodes(DRAINER), pumps, now_ts,
                                               show_offline=show_offline)
        self.out.write(report.render_table(header, rows))
        return 0

    def update_state(self, kind: str, node_id: str, state: str) -> int:
        record = self._find(kind, node_id)
        if state not in STATES:
            raise ConfigError(f"-state {state!r} is illegal; expected one of "
                              f"{', '.join(STATES)}", key="state")
        if record.is_alive and record.state != OFFLINE:
            print(f"warning: {kind[:-1]} {node_id} is alive (heartbeating): its next heartbeat "
                  f"writes its own state back; for a running node use pause-{kind[:-1]} or "
                  f"offline-{kind[:-1]}", file=self.err)
        self.registry.update_node(kind, record.copy(state=state), force=True)
        print(f"{kind[:-1]} {node_id}: state {record.state} -> {state}", file=self.out)
        return 0

    def apply_action(self, kind: str, node_id: str, action: str, *, status_addr: str = "",
                     wait_s: float = 0.0) -> int:
        record = self._find(kind, node_id)
        what = f"{kind[:-1]} {node_id}"
        addr = derive_status_addr(record.host, status_addr)
        scheme = "https" if self._ssl is not None else "http"
        url = f"{scheme}://{addr}/state/{node_id}/{action}"
        try:
            code, body = self._put(url, self._http_timeout_s, self._ssl)
        except OSError as exc:
            hint = ""
            if action == "close":
                hint = (f"; a node that is gone for good can be recorded offline instead "
                        f"(it then no longer holds back "
                        f"{'pump GC' if kind == DRAINER else 'the drainers'}): "
                        f"-cmd update-{kind[:-1]} -node-id {node_id} -state offline")
            alive = "alive" if record.is_alive else (
                f"not alive, last heartbeat {report.format_ts_time(record.update_ts)}")
            raise UnavailableError(f"{what} did not answer {url} ({exc}); its record says "
                                   f"{record.state}, {alive}; if it serves HTTP elsewhere, "
                                   f"pass --status-addr{hint}") from exc
        message = _message(body)
        if code != 200:
            raise StateError(f"{what} refused {action} (HTTP {code}): {message}",
                             state=record.state)
        print(f"{what}: {message}", file=self.out)
        if wait_s > 0:
            self._wait_for_state(kind, node_id, _FINAL_STATE[action], wait_s)
        return 0

    def generate_meta(self, data_dir: str, time_zone: str = "") -> int:
        ts = self.registry.get_ts()
        text = savepoint_text(ts, time_zone)
        path = Path(data_dir) / "savepoint"
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            tmp.write_text(text)
            tmp.replace(path)
        except OSError as exc:
            raise ConfigError(f"cannot write {path}: {exc}; pass a writable -data-dir",
                              key="data-dir") from exc
        print(f"saved commitTS {ts} ({report.format_ts_time(ts)}) to {path}", file=self.out)
        return 0

    # -- internals -----------------------------------------------------------------------
    def _find(self, kind: str, node_id: str) -> NodeStatus:
        if not node_id:
            raise ConfigError(f"this command needs -node-id <a {kind[:-1]}'s node id>; list "
                              f"them with -cmd {kind} -show-offline-nodes", key="node-id")
        record = self.registry.node(kind, node_id)
        if record is None:
            known = ", ".join(n.node_id for n in self.registry.nodes(kind)) or "none"
            raise ConfigError(f"no {kind[:-1]} with node id {node_id!r} in the registry "
                              f"(known: {known})", key="node-id")
        return record

    def _wait_for_state(self, kind: str, node_id: str, state: str, wait_s: float) -> None:
        deadline = self._clock() + wait_s
        while True:
            record = self.registry.node(kind, node_id)
            if record is not None and record.state == state:
                print(f"{kind[:-1]} {node_id} is {state}", file=self.out)
                return
            if self._clock() >= deadline:
                now = record.state if record is not None else "missing"
                raise UnavailableError(f"{kind[:-1]} {node_id} is still {now} after {wait_s:g} "
                                       f"s (waiting for {state}); see its log, or wait longer "
                                       "(a closing pump waits for every drainer to catch up)")
            self._sleep(0.2)


def _message(body: str) -> str:
    """The ``message`` of TiDB's JSON answer, else the body itself."""
    try:
        doc = json.loads(body)
    except ValueError:
        return body.strip()
    return str(doc.get("message", body.strip())) if isinstance(doc, dict) else body.strip()
