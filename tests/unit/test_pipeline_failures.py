"""What the task driver records as the task's error: one line, no terminal colour codes,
and a pipeline actor whose constructor raised stops the task instead of replaying forever
(no Ray)."""

from __future__ import annotations

from tidb_binlog.drainer.pipeline.driver import TaskDriver
from tidb_binlog.drainer.pipeline.failures import REPLAY, STOP, decide
from tidb_binlog.drainer.pipeline.failures import init_failure as _init_failure
from tidb_binlog.drainer.pipeline.failures import one_line as _one_line
from tidb_binlog.drainer.pipeline.gate import PipelineReset
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
    merger = TaskDriver.__new__(TaskDriver)  # only _fail's state; no pipeline
    merger.node = None
    merger._started = __import__("threading").Event()
    merger._fail(TransientDownstreamError("executing on 127.0.0.1:3306: error 2013: Lost "
                                          "connection; will retry"))
    assert merger.state == "failed" and merger.error == (
        "TransientDownstreamError: executing on 127.0.0.1:3306: error 2013: Lost connection "
        "(retried until the retry budget ran out)")


def test_http_status_without_a_coordinator_is_one_line_naming_the_task_error(monkeypatch):
    import pytest

    from tidb_binlog.errors import UnavailableError

    class DeadSink:
        def sink_status(self, timeout_s=10.0):
            raise RuntimeError(RAY_TEXT)

    merger = TaskDriver.__new__(TaskDriver)
    merger.calls, merger.state = DeadSink(), "failed"
    merger.error = "UnavailableError: the pipeline actor CoordinatorActor could not start"
    with pytest.raises(UnavailableError) as info:
        merger._http_status()
    text = str(info.value)
    assert "\x1b" not in text and "\n" not in text
    assert text.endswith("; the task is failed: UnavailableError: the pipeline actor "
                         "CoordinatorActor could not start")


def test_resets_and_dead_actors_replay_anything_else_stops_the_task():
    reset = PipelineReset("coordinator expected batch 3, got 0")
    assert decide(reset, lambda exc: False) == (REPLAY, reset)
    died = RuntimeError("actor died")
    assert decide(died, lambda exc: exc is died) == (REPLAY, died)
    refused = DownstreamError("refused")
    assert decide(refused, lambda exc: False) == (STOP, refused)
    constructor = PipelineReset("a pipeline actor is unavailable")
    constructor.__cause__ = InitFailed(RAY_TEXT)
    outcome, error = decide(constructor, lambda exc: True)
    assert outcome == STOP and "could not start" in str(error)
