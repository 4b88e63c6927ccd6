"""The one place that starts and stops Spark on Ray (RayDP), and talks JDBC through it.

Every Spark job goes through :func:`start_spark` / :class:`SparkHandle`, so the pieces that
must agree live together:

- **Size.** ``[spark]`` of spark.toml (``tidb_binlog.config.spark``): executors, cores and
  memory. The RayDP master actor reserves no CPU, and a size whose executors would take
  every CPU of the Ray cluster is refused: RayDP's hand-off to Ray Data waits forever when
  Spark holds all resources, and the pumps and drainers on the same cluster need CPUs too.
- **Java 17.** Spark 3.5 on JDK 17 needs ``--add-opens`` for the JDK internals it reflects
  on (the list Spark's own launcher passes); a missing or unsupported ``java`` is a clear
  error before anything starts.
- **JDBC.** The MariaDB Connector/J jar (Debian's ``libmariadb-java``, installed by
  ``scripts/setup.sh``) goes on the driver's and the executors' class path. URLs are
  ``jdbc:mysql://...?permitMysqlScheme``: Spark picks its dialect from the URL prefix, and
  only the MySQL dialect quotes identifiers with backticks (a ``jdbc:mariadb:`` URL gets
  the default dialect's double quotes, which MariaDB rejects).
- **Hand-off.** Data moves between Spark and Ray / Python through Parquet files under
  ``[spark] work-dir``, not ``ray.data.from_spark``: with ray 2.60.0, raydp 1.6.5 and
  pyspark 3.5.7 (the combination pinned in pyproject.toml) ``from_spark`` kills the Ray
  Java worker (``ObjectStoreWriter.prepareRecoverableRDD``: the actor dies), as it did on
  Ray 2.54.1; RayDP's CI only covers Ray 2.37-2.50.

Nothing here is needed to *plan* a job: the pure parts (chunks, checksum SQL, bisect, fix
SQL) live in modules that import neither Ray nor Spark.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from urllib.parse import quote

from spark_on_ray.errors import SparkSetupError
from spark_on_ray.sql_task import run_tasks
from tidb_binlog.config.spark import (
    DEFAULT_JDBC_JARS,
    DatabaseConfig,
    SparkConfig,
    resolve_jdbc_jar,
)
from tidb_binlog.errors import InvalidArgument

__all__ = ["SparkHandle", "PendingSpark", "start_spark", "start_spark_soon", "java_version", "jdbc_url", "check_java",
           "JAVA17_OPTIONS", "SUPPORTED_JAVA"]  # fmt: skip

log = logging.getLogger("spark_on_ray")

SUPPORTED_JAVA = (8, 11, 17)
_MIB = 1 << 20
# What Spark's launcher opens on JDK 17 (JavaModuleOptions), so the driver and executors
# started by RayDP can reflect on these JDK internals.
_OPENS = ("java.lang", "java.lang.invoke", "java.lang.reflect", "java.io", "java.net",
          "java.nio", "java.util", "java.util.concurrent", "java.util.concurrent.atomic",
          "sun.nio.ch", "sun.nio.cs", "sun.security.action", "sun.util.calendar")  # fmt: skip
JAVA17_OPTIONS = " ".join(f"--add-opens=java.base/{p}=ALL-UNNAMED" for p in _OPENS) + \
    " -Djdk.reflect.useDirectMethodHandle=false"
JDBC_DRIVER = "org.mariadb.jdbc.Driver"


def java_version() -> tuple[str, int]:
    """(path of ``java``, major version); :class:`SparkSetupError` when there is none."""
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    if not java or not os.access(java, os.X_OK):
        where = f"$JAVA_HOME/bin/java ({home})" if home else "java on $PATH"
        raise SparkSetupError(f"Java not found ({where}); the Spark jobs need JDK "
                              f"{'/'.join(map(str, SUPPORTED_JAVA))}: install it with "
                              "scripts/setup.sh or apt-get install -y openjdk-17-jre-headless "
                              "(or set JAVA_HOME to a JDK)")  # fmt: skip
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SparkSetupError(f"cannot run {java} -version: {exc}") from exc
    match = re.search(r'version "(1\.)?(\d+)', out.stderr + out.stdout)
    if not match:
        raise SparkSetupError(f"cannot tell the version of {java}: {out.stderr.strip()[:200]}")
    return java, int(match.group(2))


def check_java() -> tuple[str, int]:
    java, major = java_version()
    if major not in SUPPORTED_JAVA:
        raise SparkSetupError(f"{java} is Java {major}; Spark 3.5 / RayDP support Java "
                              f"{', '.join(map(str, SUPPORTED_JAVA))}: install "
                              "openjdk-17-jre-headless and put it first on $PATH or in "
                              "JAVA_HOME")  # fmt: skip
    return java, major


def check_jdbc_jar(spark: SparkConfig) -> str:
    jar = resolve_jdbc_jar(spark)
    if jar is None:
        where = spark.jdbc_jar or " or ".join(DEFAULT_JDBC_JARS)
        raise SparkSetupError(f"the MariaDB JDBC driver jar is missing ({where}); run "
                              "scripts/setup.sh (it installs Debian's libmariadb-java) or set "
                              "[spark] jdbc-jar to the jar's path")  # fmt: skip
    return jar


def jdbc_url(db: DatabaseConfig, database: str = "") -> str:
    """A ``jdbc:mysql://`` URL the MariaDB driver accepts (``permitMysqlScheme``), so that
    Spark uses its MySQL dialect (backtick quoting). No password in it.

    TLS (``[upstream.security]`` / ``[downstream.security]`` ``ssl-ca``): ``useSsl`` with
    ``serverSslCert`` = the CA file (Connector/J 2.7, Debian's, verifies the server's
    certificate against it, host name included). A client certificate is refused here:
    Connector/J takes it only from a Java keystore, not the PEM files pymysql uses."""
    url = (f"jdbc:mysql://{db.host}:{db.port}/{quote(database)}?permitMysqlScheme"
           "&useServerPrepStmts=false&tinyInt1isBit=false&zeroDateTimeBehavior=convertToNull")
    if db.security.ssl_cert:
        raise SparkSetupError(f"{db.where()}: ssl-cert is set, but the JDBC driver takes a "
                              "client certificate only from a Java keystore; the jobs' "
                              "pymysql connections use it, Spark's JDBC reads cannot")
    if db.security.ssl_ca:
        url += f"&useSsl=true&serverSslCert={quote(db.security.ssl_ca, safe='/')}"
    return url


def _cluster_cpus(ray) -> float:
    return float(ray.cluster_resources().get("CPU", 0))


@dataclass
class SparkHandle:
    """A running Spark session on Ray; :meth:`stop` (or ``with``) stops it."""

    spark: object  # pyspark.sql.SparkSession
    config: SparkConfig
    jdbc_jar: str
    started_s: float  # seconds init_spark took
    cluster_cpus: float = 0.0  # CPUs of the Ray cluster it runs on (0: unknown)

    def __enter__(self) -> SparkHandle:
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def stop(self) -> None:
        # optional heavy dependency: raydp (and with it pyspark) loads only when Spark runs
        import raydp

        if self.spark is not None:
            try:
                raydp.stop_spark()
                _wait_master_gone(self.config.app_name)
            finally:
                self.spark = None

    def jdbc_options(self, db: DatabaseConfig, database: str = "") -> dict:
        return {"url": jdbc_url(db, database), "driver": JDBC_DRIVER, "user": db.user,
                "password": db.password}

    def read_query(self, db: DatabaseConfig, sql: str, database: str = ""):
        """A DataFrame of ``sql`` run by the database (one JDBC partition). The query is the
        derived table Spark selects from, so aggregates in it run in the database."""
        reader = self.spark.read.format("jdbc")
        for key, value in self.jdbc_options(db, database).items():
            reader = reader.option(key, value)
        return reader.option("dbtable", f"({sql}) AS q").load()

    def run_barrier(self, fn, payloads: list) -> list:
        """Run ``fn(index, payload, sync)`` for every payload as one Spark *barrier* stage:
        all tasks start together (so there must be at most :attr:`slots` payloads) and
        ``sync(message) -> [every task's message]`` waits for all of them (Spark's
        ``allGather``). A failed task fails the stage; the error is raised here."""
        if not 0 < len(payloads) <= self.slots:
            raise InvalidArgument(f"{len(payloads)} barrier tasks; this Spark has {self.slots} "
                                  "task slots")
        rdd = self.spark.sparkContext.parallelize(list(enumerate(payloads)), len(payloads))
        done = rdd.barrier().mapPartitions(functools.partial(_barrier_partition, fn)).collect()
        return [result for _, result in sorted(done, key=lambda item: item[0])]

    def warm_up(self) -> None:
        """One trivial task per slot, importing what the jobs' tasks import: the executors'
        Python workers start here (seconds on a busy box) instead of inside the first job,
        whose barrier stage would otherwise wait for all of them. Then one trivial barrier
        stage: the first one in a Spark costs 0.6 s more than the next ones (measured).
        Not a barrier stage first: submitted before the executors have registered, it
        fails Spark's slot check and waits 15 s to retry. Counted in ``started_s``."""
        sc = self.spark.sparkContext
        sc.parallelize(range(self.slots), self.slots).map(_warm).collect()
        self.run_barrier(_warm, list(range(self.slots)))

    @property
    def slots(self) -> int:
        return self.config.num_executors * self.config.executor_cores

    def run_sql_tasks(self, tasks: list) -> list[list[tuple]]:
        """Run ``(DatabaseConfig, sql)`` tasks in parallel on the executors and return each
        one's rows in task order (a :class:`~spark_on_ray.sql_task.QueryFailed` for a task
        whose query failed: one bad query does not fail the others). For queries whose
        answer is small (pushed-down aggregates, a few hundred rows). Tasks are split into
        twice as many Spark partitions as there are task slots (a Spark task costs ~0.1-0.3 s on a busy 2-core box, so one
        per query would cost more than the queries); a partition runs its queries on one
        connection per server. Fewer than ``2 x slots`` tasks run right here, in order."""
        if len(tasks) < 2 * self.slots:
            return run_tasks(tasks)
        parts = 2 * self.slots
        rdd = self.spark.sparkContext.parallelize(list(enumerate(tasks)), parts)
        out: list = [None] * len(tasks)
        for index, rows in rdd.mapPartitions(_run_partition).collect():
            out[index] = rows
        return out


def _wait_executors(handle: SparkHandle) -> None:
    """Wait until every executor has registered with the driver: RayDP's start returns
    before (2-3 s before on an idle 2-core box), and the first job would wait for them
    instead, so the start's time would hide in the job's. An executor that never comes
    (no node has its Ray CPUs free) is an error after ``[spark] start-timeout``."""
    cfg = handle.config
    sc = handle.spark.sparkContext
    deadline = time.monotonic() + cfg.start_timeout_s
    while True:
        # the driver's own block manager is listed too
        registered = sc._jsc.sc().getExecutorMemoryStatus().size() - 1
        if registered >= cfg.num_executors:
            return
        if time.monotonic() >= deadline:
            raise SparkSetupError(
                f"Spark started, but {registered} of its {cfg.num_executors} executors "
                f"registered within [spark] start-timeout = {cfg.start_timeout_s:g} s: each "
                f"needs {cfg.executor_ray_cpus:g} free Ray CPU(s) and {cfg.executor_memory_bytes >> 20} "
                "MiB on one node, plus any resource [spark] configs asks for; free them (or lower "
                "executor-ray-cpus / num-executors) and rerun")
        time.sleep(0.05)


# How long stop() waits for RayDP's master actor to exit (it is told to asynchronously).
_MASTER_EXIT_S = 30.0


def _wait_master_gone(app_name: str) -> None:
    """Wait until the Spark master actor named for ``app_name`` has exited: RayDP's stop
    only asks it to, and the next start of the same app name (a second job in this
    process) is refused while the name is taken (ActorAlreadyExistsError)."""
    # heavy dependency: ray loads only when a job runs Spark
    import ray

    try:
        # optional heavy dependency: raydp (the `spark` extra), already loaded by the start
        from raydp.spark.ray_cluster_master import RAYDP_SPARK_MASTER_SUFFIX as suffix
    except ImportError:  # pragma: no cover - RayDP moved it; its value since 1.0
        suffix = "_SPARK_MASTER"
    deadline = time.monotonic() + _MASTER_EXIT_S
    while time.monotonic() < deadline:
        try:
            ray.get_actor(app_name + suffix)
        except ValueError:  # no live actor of that name
            return
        time.sleep(0.05)
    log.warning("RayDP's master actor %s%s has not exited %.0f s after Spark's stop; the "
                "next start of app %r may be refused", app_name, suffix, _MASTER_EXIT_S,
                app_name)


def _run_partition(items):
    items = list(items)
    rows = run_tasks([task for _, task in items])
    return [(index, r) for (index, _), r in zip(items, rows, strict=True)]


def _warm(*_):
    import spark_on_ray.load_task  # noqa: F401 - the import is the point
    import spark_on_ray.sql_task  # noqa: F401

    return 0


def _barrier_partition(fn, items):
    # optional heavy dependency: pyspark, imported in the executor's Python worker only
    from pyspark import BarrierTaskContext

    ctx = BarrierTaskContext.get()
    for index, payload in items:
        yield index, fn(index, payload, ctx.allGather)


def start_spark(spark_cfg: SparkConfig, *, ray_address: str | None = None,
                warm: bool = False) -> SparkHandle:
    """Start Spark on the current Ray (``ray.init`` first when needed) and return its handle.

    ``warm``: start the executors' Python workers now (:meth:`SparkHandle.warm_up`), for a
    job with a *barrier* stage (the load), whose tasks would otherwise wait for the
    slowest worker's start at the barrier. Other jobs skip it: the diff's first stage
    starts its workers in parallel anyway, and the lake jobs run in the JVM only (a
    warm-up would start Python workers they never use).

    Errors (:class:`SparkSetupError`) name what is missing and what to do: no Java, an
    unsupported Java, no JDBC jar, a size that takes every CPU of the Ray cluster.
    """
    return _launch(_prepare(spark_cfg, ray_address), warm)


class PendingSpark:
    """Spark starting in a background thread (:func:`start_spark_soon`) while the job's
    driver plans: :meth:`handle` waits for it; :meth:`discard` (the job failed before it
    needed Spark) waits and stops it."""

    def __init__(self, prepared: tuple, warm: bool):
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="spark-start")
        self._future = self._pool.submit(_launch, prepared, warm)

    def handle(self) -> SparkHandle:
        try:
            return self._future.result()
        finally:
            self._pool.shutdown(wait=False)

    def discard(self) -> None:
        try:
            try:
                handle = self._future.result()
            except Exception as exc:  # noqa: BLE001 - the job's own error is the one raised
                log.info("Spark's start, no longer needed by the failed job, failed too: %s",
                         exc)
                return
            try:
                handle.stop()
            except Exception as exc:  # noqa: BLE001 - as above
                log.warning("Spark started for a job that failed first could not be stopped "
                            "cleanly: %s", exc)
        finally:
            self._pool.shutdown(wait=False)


def start_spark_soon(spark_cfg: SparkConfig, *, ray_address: str | None = None,
                     warm: bool = False) -> PendingSpark:
    """:func:`start_spark` in a background thread: the checks (Java, the JDBC jar, Ray and
    its CPUs) run here and raise here; RayDP's start (seconds: three JVMs) overlaps what
    the caller does next, such as planning a job (a key scan of every table)."""
    return PendingSpark(_prepare(spark_cfg, ray_address), warm)


def _prepare(spark_cfg: SparkConfig, ray_address: str | None) -> tuple:
    """Everything before RayDP's start, in the caller's thread (``ray.init`` included)."""
    check_java()
    jar = check_jdbc_jar(spark_cfg)
    # heavy dependency: ray loads only when a job starts Spark (planning and the pure
    # modules stay importable without it)
    import ray

    if not ray.is_initialized():
        ray.init(address=ray_address or os.environ.get("RAY_ADDRESS") or None,
                 include_dashboard=False, log_to_driver=False)
    want = spark_cfg.num_executors * spark_cfg.executor_ray_cpus
    cpus = _cluster_cpus(ray)
    if want >= cpus:
        raise SparkSetupError(
            f"[spark] num-executors x executor-ray-cpus = {want:g} would take every CPU of the Ray "
            f"cluster ({cpus:g}); lower them so that at least one CPU stays free (RayDP's "
            "Ray Data hand-off hangs, and pumps/drainers starve, when Spark holds them all)")
    # optional heavy dependency: raydp / pyspark (the `spark` extra)
    import raydp  # noqa: F401 - imported here so that a missing extra fails in this thread

    configs = {
        "spark.driver.extraJavaOptions": JAVA17_OPTIONS,
        "spark.executor.extraJavaOptions": JAVA17_OPTIONS,
        "spark.driver.extraClassPath": jar,
        "spark.executor.extraClassPath": jar,
        "spark.jars": jar,
        "spark.driver.memory": f"{max(spark_cfg.driver_memory_bytes // _MIB, 64)}m",
        "spark.ray.raydp_spark_master.actor.resource.CPU": "0",
        "spark.ray.raydp_spark_executor.actor.resource.cpu": f"{spark_cfg.executor_ray_cpus:g}",
        "spark.sql.shuffle.partitions": str(max(2, spark_cfg.num_executors
                                                * spark_cfg.executor_cores)),
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
        **spark_cfg.configs,
    }
    # Python workers of the executors run this interpreter (the venv with pyspark), not
    # whatever "python3" is first on $PATH; PySpark reads only the environment for it.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    return spark_cfg, configs, jar, cpus


def _launch(prepared: tuple, warm: bool) -> SparkHandle:
    # optional heavy dependency: raydp (the `spark` extra); _prepare checked it imports
    import raydp

    spark_cfg, configs, jar, cpus = prepared
    t0 = time.monotonic()
    try:
        spark = raydp.init_spark(spark_cfg.app_name, num_executors=spark_cfg.num_executors,
                                 executor_cores=spark_cfg.executor_cores,
                                 executor_memory=spark_cfg.executor_memory_bytes,
                                 configs=configs)  # fmt: skip
    except Exception as exc:
        try:
            raydp.stop_spark()
        except Exception:  # noqa: BLE001 - the start error is the one to report
            pass
        raise SparkSetupError(f"RayDP could not start Spark ({spark_cfg.app_name}): "
                              f"{type(exc).__name__}: {str(exc)[:500]}") from exc
    spark.sparkContext.setLogLevel("ERROR")
    handle = SparkHandle(spark, spark_cfg, jar, 0.0, cpus)
    try:
        _wait_executors(handle)
    except BaseException:
        handle.stop()
        raise
    if warm:
        try:
            handle.warm_up()
        except BaseException:
            handle.stop()
            raise
    took = time.monotonic() - t0
    log.info("Spark %s started on Ray in %.1f s (%d x %d cores)", spark_cfg.app_name, took,
             spark_cfg.num_executors, spark_cfg.executor_cores)
    handle.started_s = took
    return handle
