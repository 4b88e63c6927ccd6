"""``PumpProcess``: a standalone ``tidb-binlog pump`` subprocess, for tests and benchmarks.

    pump = PumpProcess({"cluster-id": 4242, "storage.sync-log": True}, tmp_dir).start()
    stub = pump_pb2_grpc.PumpStub(grpc.insecure_channel(pump.addr))
    ...
    pump.kill()          # SIGKILL, as a crash would
    pump.start()         # same config, same data directory, same address
    assert pump.terminate() == 0   # SIGTERM: the pump records `paused` and exits 0

``config`` holds pump.toml keys, dotted for tables (``"storage.sync-log"``), as
:func:`tidb_binlog.config.load_pump_config` takes them; it is validated in this
process (a :class:`~tidb_binlog.errors.ConfigError` names a bad key before anything
starts) and written to ``<work_dir>/<name>.toml``. Two keys get defaults:

- ``addr``: ``127.0.0.1:<p>`` where ``p`` and ``p + 1`` are free (the pump serves
  its HTTP status on the gRPC port + 1); a port 0 is replaced the same way, so a
  restarted pump keeps its address;
- ``data-dir``: ``<work_dir>/<name>-data``.

The process runs ``python -m tidb_binlog.cli.main pump --config <file>`` in
``work_dir``, its output appended to ``log_path`` (``<work_dir>/<name>.log``, kept
across restarts). ``start()`` returns once the pump is *serving*: its HTTP
``GET /status`` reports its own record ``online``, which the CLI only reaches after
the gRPC and HTTP servers listen, so a Prewrite sent then is accepted. A process that
exits or does not get there within ``start_timeout_s`` raises
:class:`~tidb_binlog.errors.LocalServerError` with the tail of its log.

A pump with TLS (``security.ssl-cert``) is probed over HTTPS with ``probe_tls`` (an
object with ``ssl_ca``/``ssl_cert``/``ssl_key``, e.g. :class:`~.certs.TLSFiles`), by
default the pump's own ``[security]`` files, as its Notify calls use them: ``ssl-ca``
verifies its certificate (host name included) and, when set, the pump requires a client
certificate, so its own is presented. A pump without ``ssl-ca`` is probed without
verifying its certificate (nothing names the CA that signed it). With ``cert-allowed-cn``
the probe's certificate must carry a listed name: pass ``probe_tls``. No pump outlives its owner: live ones are killed at exit, and when started
from the main thread on Linux they get a parent-death signal (``setpriv
--pdeathsig``), so a SIGKILLed test run leaves none behind.
"""

from __future__ import annotations

import atexit
import http.client
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from pathlib import Path

import tidb_binlog
from tidb_binlog.config import PumpConfig, load_pump_config
from tidb_binlog.errors import LocalServerError
from tidb_binlog.testing.ports import free_port

__all__ = ["PumpProcess", "two_free_ports"]

_PACKAGE_ROOT = Path(tidb_binlog.__file__).resolve().parents[1]  # holds tidb_binlog/, cluster/
_READY_POLL_S = 0.05
_LOG_TAIL_BYTES = 4000
_live: set[PumpProcess] = set()


def two_free_ports(host: str = "127.0.0.1", attempts: int = 50) -> int:
    """A port ``p`` with ``p`` and ``p + 1`` free on ``host`` (gRPC and HTTP status); on
    127.0.0.1 from below the ephemeral range (:mod:`tidb_binlog.testing.ports`)."""
    if host == "127.0.0.1":
        return free_port(consecutive=2, attempts=attempts * 4)
    for _ in range(attempts):
        with socket.socket() as s:
            s.bind((host, 0))
            p = s.getsockname()[1]
        try:
            with socket.socket() as a, socket.socket() as b:
                a.bind((host, p))
                b.bind((host, p + 1))
            return p
        except OSError:
            continue
    raise LocalServerError(f"no two consecutive free ports on {host} after {attempts} tries",
                           name="pump")


class PumpProcess:
    """See the module docstring."""

    def __init__(self, config: dict, work_dir: str | Path, *, name: str = "pump",
                 start_timeout_s: float = 60.0, probe_tls=None):
        self.name = name
        self.work_dir = Path(work_dir).resolve()
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.start_timeout_s = start_timeout_s
        keys = {k.replace("_", "-"): v for k, v in config.items()}
        host, _, port = str(keys.get("addr", "127.0.0.1:0")).rpartition(":")
        if port == "0":
            keys["addr"] = f"{host}:{two_free_ports(host)}"
        keys.setdefault("data-dir", str(self.work_dir / f"{name}-data"))
        self.config: PumpConfig = load_pump_config(None, keys)
        security = self.config.security
        self._probe_ssl = _probe_context(probe_tls or security) if security.ssl_cert else None
        self.addr: str = self.config.addr
        host, _, port = self.addr.rpartition(":")
        self.status_addr = f"{host}:{int(port) + 1}"
        self.config_path = self.work_dir / f"{name}.toml"
        self.config_path.write_text(self.config.to_toml())
        self.log_path = self.work_dir / f"{name}.log"
        self.proc: subprocess.Popen | None = None

    # -- lifecycle -----------------------------------------------------------------------
    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def is_running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> PumpProcess:
        """Spawn the pump and return once it serves (see the module docstring)."""
        if self.is_running():
            raise LocalServerError(f"pump {self.name!r} is already running (pid {self.pid})",
                                   name=self.name, log_path=str(self.log_path))
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(
                self._command(), cwd=self.work_dir, stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT, env=self._env())
        _live.add(self)
        self.wait_until_serving()
        return self

    def wait_until_serving(self) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        last = "no answer yet"
        while True:
            if not self.is_running():
                rc = self.proc.returncode if self.proc is not None else None
                raise self._error(f"pump {self.name!r} exited with code {rc} during start-up")
            state, last = self._probe()
            if state == "online":
                return
            if time.monotonic() > deadline:
                self.kill()
                raise self._error(f"pump {self.name!r} was not serving on {self.addr} within "
                                  f"{self.start_timeout_s} s (last /status: {last})")
            time.sleep(_READY_POLL_S)

    def terminate(self, timeout_s: float = 60.0) -> int:
        """SIGTERM and wait: the exit code (0 after a clean stop). A pump still running
        after ``timeout_s`` is killed and reported as a LocalServerError."""
        if self.proc is None:
            raise LocalServerError(f"pump {self.name!r} was never started", name=self.name)
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise self._error(f"pump {self.name!r} did not stop within {timeout_s} s of "
                              "SIGTERM; it was killed") from None
        finally:
            if self.proc.poll() is not None:
                _live.discard(self)

    def kill(self) -> None:
        """SIGKILL (a crash) and reap; nothing if it is not running."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        _live.discard(self)

    def restart(self) -> PumpProcess:
        """SIGTERM (if running), then start again with the same config and address."""
        if self.is_running():
            self.terminate()
        return self.start()

    def close(self) -> None:
        self.kill()

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def __enter__(self) -> PumpProcess:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- internals -----------------------------------------------------------------------
    def _command(self) -> list[str]:
        cmd = [sys.executable, "-m", "tidb_binlog.cli.main", "pump", "--config",
               str(self.config_path)]
        setpriv = shutil.which("setpriv")
        if setpriv and threading.current_thread() is threading.main_thread():
            # The kernel sends SIGKILL to the pump when our main thread dies.
            cmd = [setpriv, "--pdeathsig", "KILL", "--", *cmd]
        return cmd

    @staticmethod
    def _env() -> dict:
        path = os.environ.get("PYTHONPATH", "")
        return {**os.environ,
                "PYTHONPATH": os.pathsep.join(p for p in (str(_PACKAGE_ROOT), path) if p)}

    def _probe(self) -> tuple[str | None, str]:
        """(this pump's state in its own GET /status, or None; what was seen)."""
        host, _, port = self.status_addr.rpartition(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=5) \
            if self._probe_ssl is None else \
            http.client.HTTPSConnection(host, int(port), timeout=5, context=self._probe_ssl)
        try:
            conn.request("GET", "/status")
            resp = conn.getresponse()
            body = resp.read()
        except (OSError, http.client.HTTPException) as exc:
            return None, f"{type(exc).__name__}: {exc}"
        finally:
            conn.close()
        if resp.status != 200:
            return None, f"HTTP {resp.status}"
        records = json.loads(body).get("status", {}).values()
        mine = [r for r in records if r.get("host") == self.config.advertise_addr]
        return (mine[0].get("state") if mine else None), body.decode(errors="replace")[:300]

    def _error(self, message: str) -> LocalServerError:
        tail = self.log_text()[-_LOG_TAIL_BYTES:]
        return LocalServerError(f"{message}; log {self.log_path} ends with:\n{tail}",
                                name=self.name, log_path=str(self.log_path))


def _probe_context(tls) -> ssl.SSLContext:
    """The readiness probe's TLS (see the module docstring)."""
    ca = getattr(tls, "ssl_ca", "") or ""
    if ca:
        ctx = ssl.create_default_context(cafile=ca)
    else:  # nothing names the CA that signed the pump's certificate: not verified
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    cert, key = getattr(tls, "ssl_cert", "") or "", getattr(tls, "ssl_key", "") or ""
    if cert and key:
        ctx.load_cert_chain(cert, key)
    return ctx


@atexit.register
def _kill_live_pumps() -> None:
    for pump in list(_live):
        pump.kill()
