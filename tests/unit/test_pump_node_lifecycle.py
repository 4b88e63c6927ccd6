"""The pump lifecycle as binlogctl drives it: a stopped pump is unavailable (expected
back), never a storage fault a drainer would give up on."""

from __future__ import annotations

import threading

import pytest

from tidb_binlog import binlog as bl
from tidb_binlog.errors import StorageError, UnavailableError
from tidb_binlog.node import PAUSED, PUMP
from tidb_binlog.pump.node import PumpNode, PumpNodeOptions
from tidb_binlog.testing.memory_storage import MemoryStorage
from tidb_binlog.testing.registry import InMemoryRegistry


def test_a_stopped_pump_is_unavailable_not_a_storage_fault(tmp_path):
    reg = InMemoryRegistry()
    storage = MemoryStorage()  # refuses pulls once closed, as the real storage does
    node = PumpNode(PumpNodeOptions(data_dir=str(tmp_path), node_id="pump-0"), storage,
                    registry=reg, notifier=lambda addr: None)
    node.start(background=False)
    ts = node.write_fake_binlog()
    assert node.pull(0)[1] >= ts
    node.stop()
    assert reg.node(PUMP, "pump-0").state == PAUSED
    with pytest.raises(StorageError, match="closed"):
        storage.pull_commits(0)
    # A drainer retries an UnavailableError (the pump comes back); a StorageError
    # would fail its replication task.
    with pytest.raises(UnavailableError, match="pump pump-0 is stopped .state paused"):
        node.pull(0)


def test_a_damaged_binlog_on_a_serving_pump_is_still_raised(tmp_path):
    class Damaged(MemoryStorage):
        def pull_commits(self, *a, **kw):
            raise StorageError("damaged")

    node = PumpNode(PumpNodeOptions(data_dir=str(tmp_path), node_id="pump-0"), Damaged(),
                    tso=iter(range(1 << 20, 1 << 21)).__next__)
    node.storage.write_binlog(bl.fake(5))
    with pytest.raises(StorageError, match="damaged"):
        node.pull(0)


class GatedRegistry(InMemoryRegistry):
    """Holds writes from threads named ``pump-duties*`` until released."""

    def __init__(self):
        super().__init__()
        self.entered = threading.Event()
        self.release = threading.Event()

    def update_node(self, kind, status, *, force=False):
        if threading.current_thread().name.startswith("pump-duties"):
            self.entered.set()
            assert self.release.wait(30), "test never released the heartbeat"
        super().update_node(kind, status, force=force)


def test_a_heartbeat_that_read_online_before_a_pause_does_not_undo_it(tmp_path):
    reg = GatedRegistry()
    node = PumpNode(PumpNodeOptions(data_dir=str(tmp_path), node_id="pump-0"), MemoryStorage(),
                    registry=reg, notifier=lambda addr: None)
    node.start(background=False)
    beat = threading.Thread(target=node.heartbeat, name="pump-duties-test")
    beat.start()
    assert reg.entered.wait(30)                    # the heartbeat read "online"
    node.apply_action("pump-0", "pause")           # binlogctl pause-pump
    assert node.done.wait(30) and node.state == PAUSED
    assert reg.node(PUMP, "pump-0").state == PAUSED
    reg.release.set()                              # the stale "online" lands now
    beat.join(30)
    assert reg.node(PUMP, "pump-0").state == PAUSED
    node.stop()
