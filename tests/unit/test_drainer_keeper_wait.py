"""The keeper waits for a DDL job that is not in the upstream's history yet.

An upstream DROP COLUMN whose final round failed leaves its job queued (its DeleteOnly
binlog already with the pumps) until the next DDL owner finishes it, which can take
minutes (an upstream restart). The keeper waits up to JOB_WAIT_S, warning every
JOB_WAIT_WARN_S; a fake clock advanced by the fake sleep keeps the test instant.
"""

from __future__ import annotations

import logging

from tidb_binlog.drainer.pipeline.settings import TaskSettings
from tidb_binlog.drainer.translate import keeper as keeper_module
from tidb_binlog.drainer.translate.keeper import JOB_WAIT_S, JOB_WAIT_WARN_S, RowKeeper
from tidb_binlog.model import ActionType, Job


class _Clock:
    def __init__(self):
        self.now = 0.0

    def sleep(self, s: float) -> None:
        self.now += s


class _Meta:
    """A history in which job 7 appears at ``appears_at`` (None: never)."""

    def __init__(self, clock: _Clock, appears_at: float | None):
        self.clock = clock
        self.appears_at = appears_at
        self.asked = 0

    def history_jobs(self, up_to_schema_version=None):
        return []

    def job(self, job_id):
        self.asked += 1
        if self.appears_at is not None and self.clock.now >= self.appears_at:
            return Job(id=job_id, type=ActionType.DROP_COLUMN, query="ALTER TABLE t DROP COLUMN c")
        return None


def _keeper(appears_at):
    clock = _Clock()
    meta = _Meta(clock, appears_at)
    return RowKeeper(TaskSettings(cluster_id=1), meta, sleep=clock.sleep, clock=lambda: clock.now), \
        clock, meta


def test_the_keeper_waits_minutes_for_a_queued_job_and_warns_while_it_waits(caplog):
    assert JOB_WAIT_S >= 600  # a restarted upstream finishes the queued job
    keeper, clock, _ = _keeper(appears_at=95.0)
    with caplog.at_level(logging.WARNING, logger=keeper_module.__name__):
        job = keeper._job(7)
    assert job is not None and job.id == 7
    warnings = [r.getMessage() for r in caplog.records if "DDL job 7" in r.getMessage()]
    assert len(warnings) == int(95 // JOB_WAIT_WARN_S)  # one per JOB_WAIT_WARN_S waited
    assert "resume_ddl_jobs" in warnings[0]


def test_a_job_that_never_appears_gives_up_after_job_wait_s():
    keeper, clock, meta = _keeper(appears_at=None)
    assert keeper._job(7) is None
    assert JOB_WAIT_S <= clock.now < JOB_WAIT_S + 2  # polled every second at most
    assert meta.asked > JOB_WAIT_S / 2
