"""Spark started in the background while a job plans (spark_on_ray.session.PendingSpark):
the handle comes back from the thread, a start error is raised to the caller, and a job
that fails first stops the Spark it no longer needs. RayDP's own start is replaced by a
scripted one (the real start is covered by tests/spark)."""

from __future__ import annotations

import threading

import pytest

from spark_on_ray import session
from spark_on_ray.errors import SparkSetupError


class _Handle:
    def __init__(self):
        self.stopped = False
        self.thread = threading.current_thread().name

    def stop(self):
        self.stopped = True


def test_the_handle_comes_from_a_background_thread(monkeypatch):
    release = threading.Event()

    def launch(prepared, warm):
        assert prepared == ("prepared",) and warm is True
        release.wait(5)
        return _Handle()

    monkeypatch.setattr(session, "_launch", launch)
    pending = session.PendingSpark(("prepared",), True)
    release.set()  # the caller planned meanwhile
    handle = pending.handle()
    assert handle.thread.startswith("spark-start") and not handle.stopped


def test_a_failed_start_is_raised_and_a_discarded_start_is_stopped(monkeypatch):
    def broken(prepared, warm):
        raise SparkSetupError("RayDP could not start Spark (x): no JVM")

    monkeypatch.setattr(session, "_launch", broken)
    with pytest.raises(SparkSetupError, match="no JVM"):
        session.PendingSpark((), False).handle()
    session.PendingSpark((), False).discard()  # the job's own error wins: nothing raised

    started = []
    monkeypatch.setattr(session, "_launch", lambda prepared, warm: started.append(_Handle())
                        or started[-1])
    session.PendingSpark((), False).discard()
    assert started and started[0].stopped


class _Status:
    def __init__(self, sizes):
        self.sizes = sizes

    def size(self):
        return self.sizes.pop(0) if len(self.sizes) > 1 else self.sizes[0]


def _fake_handle(sizes, **cfg):
    from types import SimpleNamespace

    from tidb_binlog.config.spark import SparkConfig

    status = _Status(list(sizes))
    jsc = SimpleNamespace(sc=lambda: SimpleNamespace(getExecutorMemoryStatus=lambda: status))
    spark = SimpleNamespace(sparkContext=SimpleNamespace(_jsc=jsc))
    return SimpleNamespace(spark=spark, config=SparkConfig(**cfg))


def test_the_start_waits_for_every_executor_and_says_when_one_never_comes():
    # the driver's block manager counts too: 1 = no executor yet, 3 = two executors
    session._wait_executors(_fake_handle([1, 1, 2, 3], num_executors=2))
    with pytest.raises(SparkSetupError, match=r"Spark started, but 0 of its 1 executors "
                                              r"registered within \[spark\] start-timeout = "
                                              r"0.2 s: each needs 1 free Ray CPU\(s\) and 1024 "
                                              r"MiB on one node"):
        session._wait_executors(_fake_handle([1], start_timeout_s=0.2))
