"""Shared fixtures: throwaway MariaDB servers, one local Ray per session, markers.

Markers are applied by directory: tests/integration -> ``integration``,
tests/ray -> ``ray``, tests/spark -> ``spark``.  Nothing is skipped silently:
a missing ``mariadbd`` makes the test error with the set-up hint
(``scripts/setup.sh``).

Fixtures:

- ``mariadb``: a session-scoped :class:`~tidb_binlog.testing.mariadb.MariaDBServer`.
- ``fresh_database``: ``fresh_database(*servers) -> str`` creates one uniquely named
  database on each server given (on ``mariadb`` when none is) and drops it at test end;
  ``fresh_database(pair.upstream, pair.downstream)`` gives both sides the same name.
- ``mariadb_pair``: session-scoped ``(upstream, downstream)`` servers.
- ``mariadb_factory``: ``mariadb_factory(name="db", **kw)`` starts extra servers that
  are closed at test end (restart and crash tests).
- ``ray_local``: a session-scoped local Ray (4 CPUs, ~300 MB object store, namespace
  ``tidb-binlog-test``), shut down at session end; yields the ``ray`` module.
- ``free_port``: ``free_port() -> int``, a currently free TCP port on 127.0.0.1.
- ``stack``: a :class:`~tidb_binlog.testing.stack.TestStack` (upstream and downstream
  MariaDB, a LocalCluster of pumps on ``ray_local``, the upstream writing through it),
  one per test module, shaped by the module's ``STACK = StackSpec(...)`` (else the
  ``stack_spec`` fixture, which a directory's conftest may override), given to each
  test with a clean slate (``begin_test``: earlier tests' databases dropped, its own
  ``start_ts`` for the drainer's initial-commit-ts, ``data_dir`` of its own); a stack a
  test broke is opened again for the next.
"""

from __future__ import annotations

import itertools
import logging
import os
import re
import time
from pathlib import Path
from typing import NamedTuple

import pytest

from tidb_binlog.node import ONLINE, PUMP
from tidb_binlog.testing.mariadb import MariaDBServer
from tidb_binlog.testing.ports import free_port as pick_free_port
from tidb_binlog.testing.stack import StackSpec, TestStack

TESTS_DIR = Path(__file__).resolve().parent

# Under pytest-xdist (scripts/test.sh runs two workers) each worker is a Ray world of its
# own: its local Ray, the heads its tests start and the CLIs they run keep their session
# files and `ray start`'s recorded address under /tmp/ray-<worker> (Ray reads
# $RAY_TMPDIR), so no process of one worker joins a cluster of the other.
_XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
if _XDIST_WORKER:
    _ray_tmp = os.path.join(os.environ.get("RAY_TMPDIR") or "/tmp", f"ray-{_XDIST_WORKER}")
    os.makedirs(_ray_tmp, exist_ok=True)
    os.environ["RAY_TMPDIR"] = _ray_tmp
_MARKER_BY_DIR = {"integration": "integration", "ray": "ray", "spark": "spark"}
_RAY_OBJECT_STORE_BYTES = 300 * 1024 * 1024


# How pytest-xdist hands out work (scripts/test.sh: -n 2 --dist loadfile): one module at a
# time, so its shared stack and module fixtures stay on one worker, and all of tests/spark
# as one unit (the session's Spark starts once); longest first, so the last units to run
# are short and both workers finish together: the Spark tests, the Ray tests, the
# integration tests, then the unit tests, whose many small files fill the gaps.
_DIR_RANK = {"spark": 0, "ray": 1, "integration": 2, "unit": 3}


def _top_dir(item) -> str:
    try:
        return Path(item.path).resolve().relative_to(TESTS_DIR).parts[0]
    except (ValueError, IndexError):
        return ""


def pytest_collection_modifyitems(config, items):
    for item in items:
        marker = _MARKER_BY_DIR.get(_top_dir(item))
        if marker is not None:
            item.add_marker(getattr(pytest.mark, marker))
    items.sort(key=lambda item: _DIR_RANK.get(_top_dir(item), len(_DIR_RANK)))  # stable


def pytest_xdist_make_scheduler(config, log):
    """``--dist loadfile`` with tests/spark as one unit (see above); other modes as
    pytest-xdist has them."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadScopeScheduling  # only under pytest-xdist

    class ModuleScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return "tests/spark" if path.startswith("tests/spark/") else path

    return ModuleScheduling(config, log)


@pytest.fixture(autouse=True)
def _root_log_level():
    """Each test starts at the root logger's level of the run: a CLI run in-process sets
    it (tidb_binlog.logs.setup_logging), and the next test's caplog would see INFO lines."""
    root = logging.getLogger()
    level = root.level
    yield
    root.setLevel(level)


class MariaDBPair(NamedTuple):
    upstream: MariaDBServer
    downstream: MariaDBServer


def _started(server: MariaDBServer) -> MariaDBServer:
    try:
        return server.start()
    except BaseException:
        server.close()
        raise


@pytest.fixture(scope="session")
def mariadb():
    server = _started(MariaDBServer(name="session"))
    yield server
    server.close()


@pytest.fixture(scope="session")
def mariadb_pair():
    upstream = _started(MariaDBServer(name="upstream"))
    try:
        downstream = _started(MariaDBServer(name="downstream"))
    except BaseException:
        upstream.close()
        raise
    yield MariaDBPair(upstream, downstream)
    try:
        downstream.close()
    finally:
        upstream.close()


@pytest.fixture
def mariadb_factory(tmp_path):
    servers: list[MariaDBServer] = []

    def make(name: str = "db", **kw) -> MariaDBServer:
        kw.setdefault("base_dir", tmp_path)
        server = MariaDBServer(name=name, **kw)
        servers.append(server)
        return server.start()

    yield make
    errors = []
    for server in servers:
        try:
            server.close()
        except Exception as exc:  # close them all, then report
            errors.append(exc)
    if errors:
        raise errors[0]


_db_counter = itertools.count()


@pytest.fixture
def fresh_database(request):
    created: list[tuple[MariaDBServer, str]] = []

    def make(*servers: MariaDBServer) -> str:
        servers = servers or (request.getfixturevalue("mariadb"),)
        stem = re.sub(r"\W", "_", request.node.name)[:40].lower()
        name = f"t{next(_db_counter)}_{stem}"
        for server in servers:
            conn = server.connect(autocommit=True)
            try:
                with conn.cursor() as cur:
                    cur.execute(f"CREATE DATABASE `{name}`")
            finally:
                conn.close()
            created.append((server, name))
        return name

    yield make
    for server, name in created:
        if server.is_running():
            conn = server.connect(autocommit=True)
            try:
                with conn.cursor() as cur:
                    cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
            finally:
                conn.close()


@pytest.fixture(scope="session")
def ray_local():
    import ray

    # A Ray someone else started in this process is reused and left running: two
    # ray.init calls would fail, and shutting theirs down would break them.
    started = not ray.is_initialized()
    if started:
        # On a loaded 2-core machine the raylet can take longer than Ray's default 30 s
        # to register; give it time, and retry once after a clean shutdown.
        os.environ.setdefault("RAY_raylet_start_wait_time_s", "120")
        for attempt in (1, 2):
            try:
                # "local": a Ray of our own, never one `ray start` recorded on this host
                ray.init(address="local", num_cpus=4, include_dashboard=False,
                         object_store_memory=_RAY_OBJECT_STORE_BYTES,
                         namespace="tidb-binlog-test", log_to_driver=False)
                break
            except Exception:
                ray.shutdown()
                if attempt == 2:
                    raise
    yield ray
    if started:
        ray.shutdown()


@pytest.fixture
def free_port():
    """``free_port() -> int``: a port below the kernel's ephemeral range, in this xdist
    worker's slice (tidb_binlog/testing/ports.py), so no other process takes it first."""
    return pick_free_port


def _wait_for_new_incarnation(actor, old_pid, timeout_s=120.0):
    """The pid of the restarted actor. ``ray.kill`` returns before the old process dies,
    which may still answer a call or two (seen under load): wait for a new pid."""
    import ray

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            pid = ray.get(actor.pid.remote(), timeout=timeout_s)
            if pid != old_pid:
                return pid
        except ray.exceptions.RayActorError:
            pass                                   # the restart is under way
        assert time.monotonic() < deadline, f"actor still answers from pid {old_pid}"
        time.sleep(0.2)


@pytest.fixture
def new_incarnation(ray_local):
    """``new_incarnation(actor, old_pid)``: wait until Ray's restart of an actor answers."""
    return _wait_for_new_incarnation


# -- the shared replication stack (tidb_binlog/testing/stack.py) ------------------------------
def _make_cluster(work_dir, spec: StackSpec, upstream_params: dict):
    from cluster.launch import LocalCluster, PumpOptions  # Ray: only tests with a stack
    from tidb_binlog.drainer.pipeline.names import DEFAULT_NAMESPACE

    return LocalCluster(work_dir, pumps=spec.pumps, upstream_params=upstream_params,
                        namespace=spec.namespace or DEFAULT_NAMESPACE,
                        pump_options=spec.pump_options or PumpOptions()).start()


def _check_cluster(cluster) -> str | None:
    """Why the cluster cannot serve another test: a pump or the registry that does not
    answer, or a pump the registry does not hold online."""
    from actors.ray_calls import RayCalls  # Ray: only tests with a stack

    if cluster.registry is None or len(cluster.pumps) != cluster.pump_count:
        return "the cluster was stopped, or a test removed a pump"
    for actor in cluster.pumps.values():
        RayCalls.call_within(actor, "address", timeout_s=15)
    states = {n.node_id: n.state for n in cluster.registry.nodes(PUMP)}
    offline = {n: states.get(n) for n in cluster.pumps if states.get(n) != ONLINE}
    return f"pumps not online: {offline}" if offline else None


class _StackHolder:
    def __init__(self, spec: StackSpec, base_dir: Path):
        self.spec = spec
        self.base_dir = base_dir
        self.opened = 0
        self.stack: TestStack | None = None

    def get(self) -> TestStack:
        if self.stack is not None:
            why = self.stack.healthy()
            if why is not None:  # a test broke it: the next one gets a new stack
                self.close()
        if self.stack is None:
            self.opened += 1
            self.stack = TestStack.open(self.spec, self.base_dir / f"stack-{self.opened}",
                                        make_server=lambda name, d: _started(MariaDBServer(
                                            name=name, base_dir=d)),
                                        make_cluster=_make_cluster,
                                        check_cluster=_check_cluster)
        return self.stack

    def close(self) -> None:
        if self.stack is not None:
            self.stack.close()
            self.stack = None


@pytest.fixture(scope="module")
def stack_spec() -> StackSpec:
    """The stack of a module without its own ``STACK`` (a directory's conftest may
    override this fixture)."""
    return StackSpec()


@pytest.fixture(scope="module")
def _stack_holder(request, ray_local, tmp_path_factory, stack_spec):
    holder = _StackHolder(getattr(request.module, "STACK", None) or stack_spec,
                          tmp_path_factory.mktemp("stack"))
    yield holder
    holder.close()


@pytest.fixture
def stack(_stack_holder, tmp_path) -> TestStack:
    st = _stack_holder.get()
    st.begin_test(tmp_path / "data")
    yield st
    st.end_test()
