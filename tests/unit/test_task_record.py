"""The task record's wanted state survives a restart of its actor: Ray runs the
constructor again with the submit's arguments, and the record reloads what changed since
from the registry KV (a fresh record object over the same registry stands for that)."""

from __future__ import annotations

import json

import pytest

from actors.task_record import TaskRecordActor, record_kv_key
from tidb_binlog.config import load_drainer_config
from tidb_binlog.errors import UnavailableError
from tidb_binlog.testing.registry import InMemoryRegistry

SECRET = "s3cret-pw"


def config(worker_count: int = 2):
    return load_drainer_config(None, {"syncer.to.host": "127.0.0.1", "syncer.to.port": 3306,
                                      "syncer.to.user": "root", "syncer.to.password": SECRET,
                                      "syncer.worker-count": worker_count})


def test_pause_and_update_survive_a_restart(tmp_path):
    reg = InMemoryRegistry(tmp_path / "registry")
    rec = TaskRecordActor("orders", config(), {}, reg, "inc-1")
    assert rec.get()["state"] == "running"
    rec.set_state("paused", 42)
    rec.set_worker_count(1)

    # the restart: same constructor arguments, registry reopened from its data dir
    again = TaskRecordActor("orders", config(), {}, InMemoryRegistry(tmp_path / "registry"),
                            "inc-1")
    got = again.get()
    assert got["state"] == "paused" and got["last_checkpoint_ts"] == 42
    assert got["cfg"].syncer.worker_count == 1
    # the KV holds the wanted state only, never the config (the password)
    raw = reg.kv_get(record_kv_key("orders"))
    assert SECRET not in raw and json.loads(raw)["worker_count"] == 1


def test_state_of_an_earlier_task_of_the_same_name_is_ignored():
    reg = InMemoryRegistry()
    TaskRecordActor("orders", config(), {}, reg, "old").set_state("stopped", 7)
    fresh = TaskRecordActor("orders", config(3), {}, reg, "new")
    got = fresh.get()
    assert got["state"] == "running" and got["last_checkpoint_ts"] == 0
    assert got["cfg"].syncer.worker_count == 3


def test_forget_blanks_the_saved_state():
    reg = InMemoryRegistry()
    rec = TaskRecordActor("orders", config(), {}, reg, "inc")
    rec.set_state("paused", 5)
    rec.forget()
    assert reg.kv_get(record_kv_key("orders")) == ""
    assert TaskRecordActor("orders", config(), {}, reg, "inc").get()["state"] == "running"


def test_unreadable_saved_state_is_an_error_not_a_silent_reset():
    reg = InMemoryRegistry()
    reg.kv_put(record_kv_key("orders"), "{not json")
    with pytest.raises(UnavailableError, match="task-record/orders.*unreadable"):
        TaskRecordActor("orders", config(), {}, reg, "inc").get()
