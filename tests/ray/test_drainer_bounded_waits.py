"""Every wait of the public Drainer API is bounded and names what it waited for.

The pipeline actors are stand-ins here: an actor that never answers is what these
bounds exist for, and the real ones answer (their status runs in its own concurrency
group), so a stuck one is built on purpose. The waits are real Ray calls."""

from __future__ import annotations

import time

import pytest

from cluster.drainer import Drainer
from tidb_binlog.drainer.pipeline.settings import TaskSettings
from tidb_binlog.errors import UnavailableError

pytestmark = [pytest.mark.ray, pytest.mark.timeout(300)]

STOP_STAGE = "waiting for the coordinator's close(): the SQL workers finishing, then the " \
    "final checkpoint save"


def stand_ins():
    """The stand-in actor classes, defined in a function so Ray ships them by value
    (the workers cannot import this test module)."""

    class Merger:
        def status(self):
            return {"state": "running", "error": None, "pump_positions": {"p0": 7},
                    "stop_stage": STOP_STAGE}

        def stop(self, final_state):
            time.sleep(3600)  # a close() that never returns

    class Coordinator:
        def __init__(self, answer: bool):
            self.answer = answer

        def status(self):
            if not self.answer:
                time.sleep(3600)
            return {"commit_ts": 5, "pending": 2, "outstanding": 1}

    return Merger, Coordinator


def drainer(ray_local, coordinator_answers: bool) -> Drainer:
    Merger, Coordinator = stand_ins()
    merger = ray_local.remote(max_concurrency=4)(Merger).remote()
    coordinator = ray_local.remote(concurrency_groups={"status": 1})(Coordinator).remote(
        coordinator_answers)
    return Drainer(TaskSettings(cluster_id=1), merger, None, coordinator, [])


def test_status_names_the_actor_that_did_not_answer(ray_local):
    d = drainer(ray_local, coordinator_answers=False)
    try:
        d.task_state(timeout=120)
        with pytest.raises(UnavailableError) as info:
            d.status(timeout=1.0)
        assert str(info.value) == (
            "the drainer's coordinator actor did not answer status() within 1 s (busy, "
            "restarting, or its node is gone; see the drainer log and `ray list actors`)")
        assert d.task_state(timeout=30)["state"] == "running"  # the merger answers
    finally:
        d._kill()


def test_wait_for_checkpoint_says_what_it_waited_for(ray_local):
    d = drainer(ray_local, coordinator_answers=True)
    try:
        d.status(timeout=120)  # both actors up (creating them is slow on a busy host)
        with pytest.raises(UnavailableError) as info:
            d.wait_for_checkpoint(10, timeout_s=3)
        assert str(info.value) == (
            "waited 3 s for the checkpoint to reach 10: it is at 5 (task running, 2 item(s) "
            "pending in the coordinator, 1 worker call(s) outstanding, pump positions "
            "{'p0': 7})")
    finally:
        d._kill()
    stuck = drainer(ray_local, coordinator_answers=False)
    try:
        stuck.task_state(timeout=120)  # the merger is up; the coordinator never answers
        with pytest.raises(UnavailableError) as info:
            stuck.wait_for_checkpoint(10, timeout_s=2)
        assert str(info.value).startswith(
            "waited 2 s for the checkpoint to reach 10: the drainer's coordinator actor did "
            "not answer status() within")
    finally:
        stuck._kill()


def test_stop_is_bounded_names_the_stage_and_ends_the_actors(ray_local):
    d = drainer(ray_local, coordinator_answers=True)
    d.status(timeout=120)
    with pytest.raises(UnavailableError) as info:
        d.stop(timeout=1.0)
    assert str(info.value) == (
        "the drainer's merger actor did not answer stop('paused') within 1 s (busy, "
        "restarting, or its node is gone; see the drainer log and `ray list actors`); it "
        f"was at: {STOP_STAGE}; the actors were killed, the next start replays from the "
        "last saved checkpoint")
    assert "error" in d.stop()  # idempotent: the recorded outcome, no second wait
    # killed: ray.kill is asynchronous, so a call made just after it may still be
    # answered by the dying process; the next ones fail
    deadline = time.monotonic() + 60
    with pytest.raises(ray_local.exceptions.RayActorError):
        while time.monotonic() < deadline:
            ray_local.get(d.merger.status.remote(), timeout=60)
            time.sleep(0.2)
