"""One replication test stack, shared by the tests of a module: MariaDB upstream and
downstream, a cluster of pumps, and the TiDB-behaving upstream writing through it.

Starting the stack (two throwaway MariaDB servers, the registry and the PumpActors) takes
seconds; a module's tests share one and each test gets a clean slate on it
(:meth:`TestStack.begin_test`):

- the drainers the previous test left running (``started``) are stopped, and every
  drainer record in the registry that is not offline is made offline (as ``binlogctl
  -cmd offline-drainer`` would): a paused drainer of an earlier test would hold back
  the pumps' GC and a pump's going offline;
- every database the previous tests made is dropped: upstream through the upstream (so
  its catalog and DDL history stay true), downstream directly, the checkpoint schema
  (``tidb_binlog``: checkpoint, worker progress and layout) included;
- ``start_ts`` is taken from the cluster's TSO: a test's drainer starts there
  (``initial-commit-ts``), so it never replays what earlier tests wrote;
- the module's own DDL (``StackSpec.ddl``) runs again after it.

A stack that is no longer whole (a pump or the registry gone, a server down) is closed and
opened again, so one test that breaks it does not fail the next.

Nothing here imports Ray or the cluster package: the caller passes how to make servers
and the cluster (``tests/conftest.py``'s ``stack`` fixture does), which keeps the testing
package importable in the pure core.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tidb_binlog.node import DRAINER, OFFLINE
from tidb_binlog.upstream import Upstream
from tidb_binlog.upstream.catalog import CATALOG_DB

__all__ = ["StackSpec", "TestStack", "SYSTEM_DATABASES"]

log = logging.getLogger(__name__)

SYSTEM_DATABASES = frozenset({"information_schema", "performance_schema", "mysql", "sys",
                              CATALOG_DB})
"""Databases :meth:`TestStack.begin_test` never drops (the servers' own, the upstream's
catalog)."""


@dataclass(frozen=True)
class StackSpec:
    """What a module's stack holds. A test module sets ``STACK = StackSpec(...)``."""

    pumps: int = 1
    namespace: str | None = None      # the cluster's Ray namespace (None: the default)
    downstream: bool = True           # a downstream MariaDB (file and Parquet tests: none)
    pump_options: Any = None          # cluster.launch.PumpOptions (None: the defaults)
    # run through the upstream at the start of each test: "SQL", or ("SQL", "database")
    ddl: tuple[str | tuple[str, str], ...] = ()


@dataclass
class TestStack:
    """The parts a test uses; see the module docstring for the life cycle."""

    __test__ = False  # not a test class (pytest collects Test* names)

    spec: StackSpec
    up_db: Any                        # tidb_binlog.testing.mariadb.MariaDBServer
    down_db: Any                      # MariaDBServer, or None (spec.downstream False)
    cluster: Any                      # cluster.launch.LocalCluster
    upstream: Upstream
    base_dir: Path
    started: list = field(default_factory=list)  # drainers a test started (stopped after)
    start_ts: int = 0                 # this test's first timestamp (its initial-commit-ts)
    data_dir: Path | None = None      # a directory of this test's own (drainer data, lakes)
    tests: int = 0                    # tests run on this stack so far

    check_cluster: Callable[[Any], str | None] = lambda cluster: None

    @classmethod
    def open(cls, spec: StackSpec, base_dir: Path, *,
             make_server: Callable[..., Any], make_cluster: Callable[..., Any],
             check_cluster: Callable[[Any], str | None] | None = None) -> TestStack:
        """Start the servers and the cluster. ``make_server(name, base_dir)`` returns a
        started MariaDB server; ``make_cluster(work_dir, spec, upstream_params)`` a
        started cluster with ``pump_client()``, ``get_ts()``, ``registry`` and ``stop()``;
        ``check_cluster(cluster)`` says why it cannot serve another test (None: it can)."""
        base_dir.mkdir(parents=True, exist_ok=True)
        opened: list = []
        try:
            up_db = make_server("up", base_dir)
            opened.append(up_db)
            down_db = make_server("down", base_dir) if spec.downstream else None
            if down_db is not None:
                opened.append(down_db)
            cluster = make_cluster(base_dir / "cluster", spec, up_db.params())
            opened.append(cluster)
            upstream = Upstream(up_db.params(), cluster.pump_client(), cluster.get_ts)
        except BaseException:
            for part in reversed(opened):
                _close(part)
            raise
        stack = cls(spec, up_db, down_db, cluster, upstream, base_dir)
        if check_cluster is not None:
            stack.check_cluster = check_cluster
        return stack

    def __iter__(self):
        """``up_db, down_db, cluster, upstream = stack``: the four parts most tests use."""
        return iter((self.up_db, self.down_db, self.cluster, self.upstream))

    # -- each test -----------------------------------------------------------------------
    def begin_test(self, data_dir: Path) -> None:
        """A clean slate for the next test (the module docstring's list)."""
        self.stop_drainers()
        if self.tests:
            self._retire_drainer_records()
            for name in self._databases(self.up_db):
                try:
                    self.upstream.ddl(f"DROP DATABASE IF EXISTS `{name}`")
                except Exception as exc:  # made in MariaDB behind the upstream's back
                    log.info("dropping %s upstream directly (%s)", name, exc)
                    self._drop(self.up_db, name)
            if self.down_db is not None:
                self._drop_all(self.down_db)
            self.upstream.flush()
        self.tests += 1
        self.data_dir = data_dir
        self.start_ts = self.cluster.get_ts()
        for ddl in self.spec.ddl:
            sql, database = (ddl, None) if isinstance(ddl, str) else ddl
            self.upstream.ddl(sql, database)

    def end_test(self) -> None:
        self.stop_drainers()

    def stop_drainers(self) -> None:
        """Stop every drainer in ``started`` (a failed test leaves its task running)."""
        while self.started:
            drainer = self.started.pop()
            try:
                drainer.stop()
            except Exception as exc:  # stop them all; a stuck one is killed by stop()
                log.warning("a drainer left by a test did not stop cleanly: %s", exc)

    def healthy(self) -> str | None:
        """Why the stack cannot serve another test (None: it can)."""
        for server in (self.up_db, self.down_db):
            if server is not None and not server.is_running():
                return f"MariaDB {server.name!r} is not running"
        try:
            return self.check_cluster(self.cluster)
        except Exception as exc:  # the registry or a pump does not answer
            return f"the cluster does not answer: {exc}"

    def close(self) -> None:
        self.stop_drainers()
        for part in (self.upstream, self.cluster, self.down_db, self.up_db):
            if part is not None:
                _close(part)

    # -- internals -----------------------------------------------------------------------
    def _retire_drainer_records(self) -> None:
        registry = self.cluster.registry
        for status in registry.nodes(DRAINER):
            if status.state != OFFLINE:
                registry.update_node(DRAINER, dataclasses.replace(status, state=OFFLINE,
                                                                  is_alive=False), force=True)

    @staticmethod
    def _databases(server) -> list[str]:
        conn = server.connect(autocommit=True)
        try:
            with conn.cursor() as cur:
                cur.execute("SHOW DATABASES")
                return [r[0] for r in cur.fetchall() if r[0].lower() not in SYSTEM_DATABASES]
        finally:
            conn.close()

    def _drop_all(self, server) -> None:
        for name in self._databases(server):
            self._drop(server, name)

    @staticmethod
    def _drop(server, name: str) -> None:
        conn = server.connect(autocommit=True)
        try:
            with conn.cursor() as cur:
                cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
        finally:
            conn.close()


def _close(part) -> None:
    closer = part.stop if hasattr(part, "stop") and not hasattr(part, "close") else part.close
    try:
        closer()
    except Exception as exc:  # close everything, then go on
        log.warning("closing %r failed: %s", part, exc)
