"""TaskRecordActor: what a named replication task *is*, kept while its actors come and go.

A detached, named actor (``<task>-task`` in the task's namespace) holding the resolved
drainer config, the start options and the task's wanted state (``running``,
``paused``, ``stopped``). ``pause()`` / ``stop()`` end the pipeline actors (after the
final checkpoint); ``resume()`` and ``update(worker_count=...)`` start them again
from this record, from any driver: nothing the submitting driver held is needed.
It holds no connection and does no work, so it costs nothing while the task runs.

Surviving its own restart: Ray restarts the actor (``max_restarts=-1``) by running
its constructor again with the arguments of the submit, which would bring back the
submitted state (``running``, the submitted worker count) and forget a ``pause()`` or
an ``update()`` made since. So every change is first written to the registry's KV
(persisted to disk, like the drainer state TiDB Binlog keeps in PD's etcd) under
``task-record/<task>``, and a restarted record reloads it before it answers. The KV
value is a small JSON object of what changed since the submit (state, last
checkpoint, worker count), never the config itself: the config holds the
downstream's password, and the constructor arguments already carry it.

A submit stamps the record with a fresh ``incarnation`` id and the KV value carries
it: a value left by an earlier task of the same name (removed, then submitted again)
has another id and is ignored; ``forget()`` (called by ``remove``) blanks it.
"""

from __future__ import annotations

__all__ = ["TaskRecordActor", "record_actor_name", "record_kv_key", "start_task_record"]

import dataclasses
import json
import logging
import uuid

from actors.ray_calls import RayCalls
from tidb_binlog.errors import UnavailableError

log = logging.getLogger(__name__)


def record_actor_name(task: str) -> str:
    return f"{task}-task"


def record_kv_key(task: str) -> str:
    """The registry KV key of a task's persisted wanted state."""
    return f"task-record/{task}"


class TaskRecordActor:
    """The config, start options and wanted state of one named task.

    ``registry``: a :class:`tidb_binlog.node.RegistryClient` (its KV persists the
    changes); None keeps them in memory only (a restart forgets them).
    ``incarnation``: the submit's id (see the module doc).
    """

    def __init__(self, name: str, cfg, options: dict, registry=None,
                 incarnation: str = ""):
        self.name = name
        self.cfg = cfg
        self.options = dict(options)
        self.state = "running"
        self.last_checkpoint_ts = 0
        self._registry = registry
        self._incarnation = incarnation
        # Loaded on the first call, not here: a constructor that raises (registry
        # briefly unreachable) would end the actor for good instead of restarting it.
        self._loaded = registry is None

    # -- the record -----------------------------------------------------------------------
    def get(self) -> dict:
        self._load()
        return {"name": self.name, "cfg": self.cfg, "options": dict(self.options),
                "state": self.state, "last_checkpoint_ts": self.last_checkpoint_ts}

    def set_state(self, state: str, checkpoint_ts: int | None = None) -> None:
        self._load()
        checkpoint = self.last_checkpoint_ts if checkpoint_ts is None else checkpoint_ts
        self._save(state, checkpoint, self.cfg.syncer.worker_count)
        self.state, self.last_checkpoint_ts = state, checkpoint

    def set_worker_count(self, worker_count: int) -> None:
        """The config with ``worker_count`` SQL workers from now on (``update``)."""
        self._load()
        self._save(self.state, self.last_checkpoint_ts, worker_count)
        self.cfg = _with_worker_count(self.cfg, worker_count)

    def forget(self) -> None:
        """Blank the persisted state (the task is being removed)."""
        if self._registry is not None:
            self._registry.kv_put(record_kv_key(self.name), "")

    # -- persistence ----------------------------------------------------------------------
    def _save(self, state: str, checkpoint_ts: int, worker_count: int) -> None:
        """Write the wanted state to the registry before the record changes: a write
        that fails leaves the record as it was and raises to the caller."""
        if self._registry is None:
            return
        value = json.dumps({"incarnation": self._incarnation, "state": state,
                            "last_checkpoint_ts": int(checkpoint_ts),
                            "worker_count": int(worker_count)}, sort_keys=True)
        self._registry.kv_put(record_kv_key(self.name), value)

    def _load(self) -> None:
        if self._loaded:
            return
        key = record_kv_key(self.name)
        try:
            raw = self._registry.kv_get(key)
        except UnavailableError as exc:
            raise UnavailableError(f"the record of task {self.name!r} cannot read its saved "
                                   f"state (registry KV {key!r}): {exc}; it is retried on "
                                   "the next call") from exc
        if raw:
            try:
                saved = json.loads(raw)
                mine = saved.get("incarnation") == self._incarnation
                state = str(saved["state"])
                checkpoint = int(saved["last_checkpoint_ts"])
                worker_count = int(saved["worker_count"])
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                raise UnavailableError(
                    f"the saved state of task {self.name!r} in the registry KV ({key!r}) is "
                    f"unreadable ({exc}); remove the task and submit it again") from None
            if mine:
                self.state, self.last_checkpoint_ts = state, checkpoint
                if worker_count != self.cfg.syncer.worker_count:
                    self.cfg = _with_worker_count(self.cfg, worker_count)
                log.info("task record %s reloaded: %s at checkpoint %d, %d SQL workers",
                         self.name, state, checkpoint, worker_count)
        self._loaded = True


def _with_worker_count(cfg, worker_count: int):
    return dataclasses.replace(cfg, syncer=dataclasses.replace(cfg.syncer,
                                                               worker_count=worker_count))


def new_incarnation() -> str:
    """A fresh id for one submit of a task."""
    return uuid.uuid4().hex


def start_task_record(name: str, cfg, options: dict, namespace: str, registry=None):
    """The detached record actor of task ``name`` (no CPU, restartable), persisting its
    changes in ``registry``'s KV."""
    return RayCalls.start_actor(TaskRecordActor, name, cfg, options, registry,
                                new_incarnation(), options=dict(
                                    name=record_actor_name(name), namespace=namespace,
                                    lifetime="detached", max_restarts=-1, num_cpus=0))
