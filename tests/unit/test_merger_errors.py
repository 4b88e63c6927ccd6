"""What the merger records as the task's error: one line, no terminal colour codes, and a
pipeline actor whose constructor raised stops the task instead of replaying forever."""

from __future__ import annotations

from actors.merger import MergerActor, _init_failure, _one_line
from actors.ray_calls import PipelineReset
from tidb_binlog.errors import DownstreamError, TransientDownstreamError

RAY_TEXT = ("The actor died because of an error raised in its creation task, \x1b[36mray::"
            "CoordinatorActor.__init__()\x1b[39m (pid=1, ip=10.0.0.1)\n  File \"x.py\", line 3,"
            " in __init__\n    self.reset()\ntidb_binlog.errors.DownstreamError: connecting to "
            "the downstream 127.0.0.1:3306 as 'root': error 1045: Access denied")


class InitFailed(Exception):  # what Ray raises: RayActorError with actor_init_failed set
    actor_init_failed = True


def test_a_constructor_failure_becomes_one_clear_error():
    reset = PipelineReset("a pipeline actor is unavailable: ...")
    reset.__cause__ = InitFailed(RAY_TEXT)
    failed = _init_failure(reset)
    assert str(failed) == (
        "the pipeline actor CoordinatorActor could not start: tidb_binlog.errors."
        "DownstreamError: connecting to the downstream 127.0.0.1:3306 as 'root': error 1045: "
        "Access denied; fix the cause and start the drainer again")
    assert _init_failure(PipelineReset("coordinator expected batch 3, got 0")) is None


def test_ray_errors_are_one_uncoloured_line():
    assert _one_line(RuntimeError(RAY_TEXT)) == (
        "The actor died because of an error raised in its creation task, ray::CoordinatorActor"
        ".__init__() (pid=1, ip=10.0.0.1) ... tidb_binlog.errors.DownstreamError: connecting "
        "to the downstream 127.0.0.1:3306 as 'root': error 1045: Access denied")
    assert _one_line(DownstreamError("refused")) == "refused"


def test_a_transient_error_that_stops_the_task_does_not_say_will_retry():
    merger = MergerActor.__new__(MergerActor)  # only _fail's state; no pipeline
    merger.node = None
    merger._started = __import__("threading").Event()
    merger._fail(TransientDownstreamError("executing on 127.0.0.1:3306: error 2013: Lost "
                                          "connection; will retry"))
    assert merger.state == "failed" and merger.error == (
        "TransientDownstreamError: executing on 127.0.0.1:3306: error 2013: Lost connection "
        "(retried until the retry budget ran out)")


def test_http_status_without_a_coordinator_is_one_line_naming_the_task_error(monkeypatch):
    import pytest

    import actors.merger as merger_mod
    from tidb_binlog.errors import UnavailableError

    def dead(actor, timeout_s=10.0):
        raise RuntimeError(RAY_TEXT)

    monkeypatch.setattr(merger_mod.RayCalls, "status", staticmethod(dead))
    merger = MergerActor.__new__(MergerActor)
    merger.coordinator, merger.state = None, "failed"
    merger.error = "UnavailableError: the pipeline actor CoordinatorActor could not start"
    with pytest.raises(UnavailableError) as info:
        merger._http_status()
    text = str(info.value)
    assert "\x1b" not in text and "\n" not in text
    assert text.endswith("; the task is failed: UnavailableError: the pipeline actor "
                         "CoordinatorActor could not start")
