"""Throwaway MariaDB servers for tests and the demo.

:class:`MariaDBServer` runs a private ``mariadbd`` that nothing else shares:

- **Data directory**: made by ``mariadb-install-db`` once per process into a
  template directory, then copied for every server (a copy takes tens of
  milliseconds; an install takes about a second).
- **Network**: TCP on ``127.0.0.1`` at a random free port (or the port given),
  plus a unix socket in the server's own directory.  ``root`` logs in over TCP
  with an empty password (``--auth-root-authentication-method=normal`` creates
  ``root@127.0.0.1`` without a password).
- **Options**: ``--no-defaults`` (no system ``my.cnf`` is read), runs as the
  current user (``--user=root`` when root), a small footprint (64 MiB buffer
  pool, 32 MiB redo log, performance_schema off), binlog off (``log_bin=True``:
  the server's own binlog on, ``binlog_format=ROW`` and a ``server_id``, so that
  a native replica can follow it), durability
  settings and ``sql_mode`` left at MariaDB's defaults,
  ``character-set-server=utf8mb4``, ``collation-server=utf8mb4_bin``,
  ``max_allowed_packet=256M``.
- **Time zone** ``+00:00``: otherwise the server follows the host's system zone
  and ``TIMESTAMP`` columns and ``NOW()`` read back differently on every machine.
  TiDB encodes ``TIMESTAMP`` datums in UTC in its binlog, so a UTC server makes
  upstream, downstream and binlog agree wherever the tests run.
- **Life cycle**: :meth:`start` waits until a client can connect (or raises
  :class:`~tidb_binlog.errors.LocalServerError` with the tail of the server's
  error log); :meth:`stop` shuts down cleanly (SIGTERM); :meth:`kill` sends
  SIGKILL to the server's process group; :meth:`restart` reuses the data
  directory and port; :meth:`close` stops and removes everything.
- **No leftovers**: every live server is killed and removed at interpreter exit
  (``atexit``), and on Linux the server gets a parent-death signal (via
  ``setpriv --pdeathsig``) when started from the main thread, so even a
  SIGKILLed test run leaves no server behind.  Directories of dead owners are
  swept the next time a process builds its template.

Example::

    with MariaDBServer(name="upstream") as db:
        conn = db.connect()
        with conn.cursor() as cur:
            cur.execute("SELECT 1")
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pymysql

from tidb_binlog.errors import InvalidArgument, LocalServerError

__all__ = ["MariaDBServer", "find_binaries", "SETUP_HINT"]

SETUP_HINT = "run scripts/setup.sh (it installs mariadb-server with apt-get)"

# Every directory we create starts with this prefix and holds OWNER_FILE, the pid
# of the process that made it; a directory whose owner is dead is stale.
_DIR_PREFIX = "tidb-binlog-mariadb-"
OWNER_FILE = "owner.pid"

_BUFFER_POOL = "64M"
_REDO_LOG = "32M"  # install and server must agree, or the server resizes the log
_SOCKET_PATH_MAX_BYTES = 100  # sun_path holds 108 bytes including the NUL
_PORT_RETRIES = 3
_STOP_TIMEOUT_S = 60.0

_template_lock = threading.Lock()
_template_dir: Path | None = None
_live: set[MariaDBServer] = set()


def find_binaries() -> tuple[str, str]:
    """Paths of ``mariadbd`` and ``mariadb-install-db``; LocalServerError if missing."""
    found = []
    for name, fallbacks in (("mariadbd", ["/usr/sbin/mariadbd", "/usr/libexec/mariadbd"]),
                            ("mariadb-install-db", ["/usr/bin/mariadb-install-db"])):
        path = shutil.which(name) or next((f for f in fallbacks if os.access(f, os.X_OK)), None)
        if path is None:
            raise LocalServerError(f"{name} not found on PATH or in {fallbacks}; {SETUP_HINT}",
                                   name=name)
        found.append(path)
    return found[0], found[1]


def _user_args() -> list[str]:
    return ["--user=root"] if os.geteuid() == 0 else []


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _sweep_stale(parent: Path) -> None:
    """Remove directories left by processes that died without cleaning up."""
    for d in parent.glob(_DIR_PREFIX + "*"):
        try:
            owner = int((d / OWNER_FILE).read_text())
        except (OSError, ValueError):
            continue  # not ours, or being created right now
        if not _pid_alive(owner):
            shutil.rmtree(d, ignore_errors=True)


def _make_dir(name: str, parent: str | os.PathLike | None) -> Path:
    d = Path(tempfile.mkdtemp(prefix=f"{_DIR_PREFIX}{name}-", dir=parent))
    (d / OWNER_FILE).write_text(str(os.getpid()))
    return d


def _template() -> Path:
    """The process-wide installed data directory, made on first use."""
    global _template_dir
    with _template_lock:
        if _template_dir is not None:
            return _template_dir
        _, install_db = find_binaries()
        _sweep_stale(Path(tempfile.gettempdir()))
        root = _make_dir("template", None)
        log = root / "install.log"
        cmd = [install_db, "--no-defaults", f"--datadir={root / 'data'}", *_user_args(),
               "--auth-root-authentication-method=normal", "--skip-test-db",
               "--skip-name-resolve", f"--innodb-log-file-size={_REDO_LOG}",
               f"--innodb-buffer-pool-size={_BUFFER_POOL}"]
        with open(log, "wb") as out:
            rc = subprocess.call(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=root)
        if rc != 0:
            tail = _tail(log)
            shutil.rmtree(root, ignore_errors=True)
            raise LocalServerError(f"mariadb-install-db failed (exit {rc}):\n{tail}",
                                   name="template", log_path=str(log))
        _template_dir = root
        return root


def _tail(path: Path, lines: int = 25) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        return f"(cannot read {path}: {exc})"
    return "\n".join(text.splitlines()[-lines:])


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _port_taken(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return True
            raise
    return False


class MariaDBServer:
    """One private ``mariadbd``; see the module docstring for its settings.

    ``base_dir`` is where the server's directory is created (default: the
    system temp dir); ``port`` None picks a free one; ``name`` shows up in
    directory names and errors.  ``options`` adds or overrides server options
    (``{"innodb-buffer-pool-size": "256M"}``). ``tls`` (the server's
    :class:`~tidb_binlog.testing.certs.TLSFiles`) turns TLS on with
    ``require_secure_transport=ON``. ``log_bin`` turns the server's own binlog on
    (``log-bin`` in its directory, ``binlog_format=ROW``, MariaDB's GTIDs) in place of
    ``--skip-log-bin``; ``server_id`` (default 1) matters once servers replicate.
    """

    host = "127.0.0.1"
    user = "root"
    password = ""

    def __init__(self, base_dir: str | os.PathLike | None = None, port: int | None = None,
                 name: str = "db", *, options: dict[str, str] | None = None,
                 start_timeout_s: float = 60.0, tls=None, log_bin: bool = False,
                 server_id: int | None = None):
        if server_id is not None and not 1 <= server_id <= 0xFFFFFFFF:
            raise InvalidArgument(f"server_id must be in 1..4294967295, not {server_id}")
        self.name = name
        self.log_bin = log_bin
        self.server_id = server_id
        # TLS (a tidb_binlog.testing.certs.TLSFiles of the server's files): the server
        # serves TLS and requires it on TCP (require_secure_transport); connect() uses it.
        self.tls = tls
        self._base_dir = base_dir
        self._fixed_port = port is not None
        self._port = port
        self._options = dict(options or {})
        self._start_timeout_s = start_timeout_s
        self._dir: Path | None = None
        self._sock_dir: Path | None = None
        self._proc: subprocess.Popen | None = None

    # -- properties -------------------------------------------------------

    @property
    def port(self) -> int:
        if self._port is None:
            raise LocalServerError(f"MariaDB {self.name!r} has no port before start()",
                                   name=self.name)
        return self._port

    @property
    def directory(self) -> Path | None:
        """The server's own directory (data, socket, logs), None before start()."""
        return self._dir

    @property
    def datadir(self) -> Path:
        return self._require_dir() / "data"

    @property
    def socket(self) -> str:
        return str((self._sock_dir or self._require_dir()) / "mysqld.sock")

    @property
    def error_log(self) -> Path:
        return self._require_dir() / "error.log"

    def params(self) -> dict:
        """Keyword arguments for ``pymysql.connect``."""
        return {"host": self.host, "port": self.port, "user": self.user,
                "password": self.password}

    def client_ssl(self) -> dict | None:
        """pymysql's ``ssl`` for this server: verified TLS when it has ``tls``, else None.
        Not part of :meth:`params` (those are ``[syncer.to]`` keys)."""
        return {"ca": self.tls.ssl_ca} if self.tls is not None else None

    def connect(self, database: str | None = None, **kw) -> pymysql.connections.Connection:
        """A new pymysql connection (autocommit off unless ``kw`` says otherwise; TLS
        when the server has ``tls``)."""
        args = {**self.params(), "database": database, "autocommit": False,
                "ssl": self.client_ssl(), **kw}
        return pymysql.connect(**args)

    def is_running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    # -- life cycle -------------------------------------------------------

    def start(self) -> MariaDBServer:
        """Create the data directory on first start, then run and wait for the server."""
        if self.is_running():
            return self
        mariadbd, _ = find_binaries()
        if self._dir is None:
            template = _template()
            self._dir = _make_dir(self.name, self._base_dir)
            shutil.copytree(template / "data", self._dir / "data", symlinks=True)
            (self._dir / "tmp").mkdir()
            if len(str(self._dir / "mysqld.sock").encode()) > _SOCKET_PATH_MAX_BYTES:
                self._sock_dir = _make_dir(f"{self.name}-sock", None)
            _live.add(self)
        for attempt in range(_PORT_RETRIES):
            if self._port is None:
                self._port = _free_port()
            elif _port_taken(self._port):
                raise self._port_error()
            self._spawn(mariadbd)
            try:
                self._wait_ready()
                self._fixed_port = True  # restart() keeps this port or fails loudly
                return self
            except LocalServerError:
                if self._fixed_port or not self._bind_failed() or attempt == _PORT_RETRIES - 1:
                    raise
                self._port = None  # another process took our random port: pick again
        return self

    def stop(self, timeout_s: float = _STOP_TIMEOUT_S) -> None:
        """Clean shutdown (SIGTERM, then wait); SIGKILL and raise if it hangs."""
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired as exc:
                self.kill()
                raise LocalServerError(
                    f"MariaDB {self.name!r} did not shut down within {timeout_s} s and was "
                    f"killed; error log tail:\n{_tail(self.error_log)}",
                    name=self.name, log_path=str(self.error_log)) from exc
        self._proc = None

    def kill(self) -> None:
        """SIGKILL the server's process group, as a crash would."""
        proc = self._proc
        if proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        self._proc = None

    def restart(self) -> MariaDBServer:
        """Stop cleanly and start again on the same data directory and port."""
        self.stop()
        return self.start()

    def close(self) -> None:
        """Stop the server (killing it if needed) and remove its directories."""
        try:
            if self.is_running():
                self.stop()
        finally:
            self.kill()
            for d in (self._dir, self._sock_dir):
                if d is not None:
                    shutil.rmtree(d, ignore_errors=True)
            self._dir = self._sock_dir = None
            _live.discard(self)

    def __enter__(self) -> MariaDBServer:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "running" if self.is_running() else "stopped"
        return f"MariaDBServer(name={self.name!r}, port={self._port}, {state}, dir={self._dir})"

    # -- internals --------------------------------------------------------

    def _require_dir(self) -> Path:
        if self._dir is None:
            raise LocalServerError(f"MariaDB {self.name!r} has no directory before start()",
                                   name=self.name)
        return self._dir

    def _command(self, mariadbd: str) -> list[str]:
        d = self._dir
        opts = {
            "datadir": str(d / "data"), "tmpdir": str(d / "tmp"), "socket": self.socket,
            "pid-file": str(d / "mysqld.pid"), "log-error": str(self.error_log),
            "port": str(self._port), "bind-address": self.host,
            "innodb-buffer-pool-size": _BUFFER_POOL, "innodb-log-file-size": _REDO_LOG,
            "performance-schema": "OFF", "character-set-server": "utf8mb4",
            "collation-server": "utf8mb4_bin", "default-time-zone": "+00:00",
            "max-allowed-packet": "256M", "max-connections": "500",
        }
        if self.tls is not None:
            opts.update({"ssl-ca": self.tls.ssl_ca, "ssl-cert": self.tls.ssl_cert,
                         "ssl-key": self.tls.ssl_key, "require-secure-transport": "ON"})
        if self.server_id is not None:
            opts["server-id"] = str(self.server_id)
        if self.log_bin:
            opts.update({"log-bin": str(d / "data" / "mariadb-bin"), "binlog-format": "ROW"})
        opts.update(self._options)
        cmd = [mariadbd, "--no-defaults", *_user_args(),
               *(f"--{k}={v}" for k, v in opts.items()),
               *(() if self.log_bin else ("--skip-log-bin",)), "--skip-name-resolve"]
        setpriv = shutil.which("setpriv")
        if setpriv and threading.current_thread() is threading.main_thread():
            # The kernel sends SIGKILL to the server when our main thread dies.
            cmd = [setpriv, "--pdeathsig", "KILL", "--", *cmd]
        return cmd

    def _spawn(self, mariadbd: str) -> None:
        with open(self._dir / "stdout.log", "ab") as out:
            self._proc = subprocess.Popen(self._command(mariadbd), stdin=subprocess.DEVNULL,
                                          stdout=out, stderr=subprocess.STDOUT,
                                          cwd=self._dir, start_new_session=True)

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self._start_timeout_s
        last_exc: Exception | None = None
        while True:
            if self._proc.poll() is not None:
                rc = self._proc.returncode
                self._proc = None
                if self._bind_failed() and self._fixed_port:
                    raise self._port_error()
                raise LocalServerError(
                    f"MariaDB {self.name!r} exited with code {rc} during start-up; "
                    f"error log {self.error_log} ends with:\n{_tail(self.error_log)}",
                    name=self.name, log_path=str(self.error_log))
            try:
                pymysql.connect(**self.params(), connect_timeout=2, read_timeout=2,
                                write_timeout=2, ssl=self.client_ssl()).close()
                return
            except pymysql.err.MySQLError as exc:
                last_exc = exc
            if time.monotonic() > deadline:
                self.kill()
                raise LocalServerError(
                    f"MariaDB {self.name!r} did not accept connections on {self.host}:"
                    f"{self._port} within {self._start_timeout_s} s (last error: {last_exc}); "
                    f"error log {self.error_log} ends with:\n{_tail(self.error_log)}",
                    name=self.name, log_path=str(self.error_log))
            time.sleep(0.05)

    def _bind_failed(self) -> bool:
        try:
            text = self.error_log.read_text(errors="replace")
        except OSError:
            return False
        return "Address already in use" in text.split("Starting MariaDB")[-1]

    def _port_error(self) -> LocalServerError:
        return LocalServerError(
            f"MariaDB {self.name!r} cannot listen on {self.host}:{self._port}: the port is "
            "already in use; pass another port, or port=None to pick a free one",
            name=self.name, log_path=str(self._dir / "error.log") if self._dir else None)


@atexit.register
def _cleanup_at_exit() -> None:
    for server in list(_live):
        server.kill()
        server.close()
    if _template_dir is not None:
        shutil.rmtree(_template_dir, ignore_errors=True)
