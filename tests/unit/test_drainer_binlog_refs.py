"""Large binlogs by reference on the drainer side (``[syncer] large-binlog-bytes``): the
pump feeds ask for references only where the keeper streams them, the merge hands a
``BinlogRef`` on untouched (never fetched, counted as its payload's size), and the row
keeper reads it from a :class:`ByteSource` chunk by chunk with the same rows and plan as
the payload whole; a pump gone mid-read is a pipeline reset."""

from __future__ import annotations

import pytest
from test_drainer_txn_chunks import _call, _history, _Meta, commit_with, inserts, translator

from tidb_binlog import binlog as bl
from tidb_binlog.binlog_ref import DEFAULT_REF_ABOVE_BYTES, BinlogRef, BytesSource
from tidb_binlog.config import DrainerConfig, load_drainer_config
from tidb_binlog.drainer.pipeline.gate import PipelineReset
from tidb_binlog.drainer.pipeline.merge_loop import OUT_OF_BAND_BYTES, keeper_items, routed_items
from tidb_binlog.drainer.pipeline.settings import TaskSettings
from tidb_binlog.drainer.source.merge import Merger
from tidb_binlog.drainer.source.pump_source import ActorPumpSource
from tidb_binlog.drainer.translate.keeper import RowKeeper, translate_or_chunk
from tidb_binlog.errors import InvalidArgument, UnavailableError

BIG_TS = 60


# -- settings ------------------------------------------------------------------------------

def test_large_binlog_bytes_is_read_from_drainer_toml(tmp_path):
    assert DrainerConfig().syncer.large_binlog_bytes == DEFAULT_REF_ABOVE_BYTES == 8 << 20
    path = tmp_path / "drainer.toml"
    path.write_text('[syncer]\nlarge-binlog-bytes = "64 KiB"\n')
    cfg = load_drainer_config(path, env={})
    assert cfg.syncer.large_binlog_bytes == 64 << 10
    settings = TaskSettings.from_config(cfg, upstream_meta={})
    assert settings.large_binlog_bytes == 64 << 10


@pytest.mark.parametrize("overrides, expected", [
    ({}, DEFAULT_REF_ABOVE_BYTES),                        # routed MySQL with chunks
    ({"exactly_once": False}, DEFAULT_REF_ABOVE_BYTES),   # causality mode, chunked
    ({"large_binlog_bytes": 0}, 0),                       # off
    ({"txn_chunk_rows": 0}, 0),                           # the keeper takes it whole
    ({"loopback_control": True}, DEFAULT_REF_ABOVE_BYTES),  # verdict read by range
    ({"loopback_control": True, "exactly_once": False},   # the same, causality mode
     DEFAULT_REF_ABOVE_BYTES),
    ({"exactly_once": False, "txn_atomic": True},         # atomic chunks, one worker
     DEFAULT_REF_ABOVE_BYTES),
    ({"relay_dir": "/tmp/relay"}, DEFAULT_REF_ABOVE_BYTES),  # exactly-once, atomic chunks
    ({"relay_dir": "/tmp/relay", "exactly_once": False},  # a relay record a chunk
     DEFAULT_REF_ABOVE_BYTES),
    ({"sink": "file", "exactly_once": False},             # pb record parts
     DEFAULT_REF_ABOVE_BYTES),
    ({"sink": "file", "exactly_once": False, "txn_chunk_rows": 0}, 0),  # records whole
    ({"sink": "parquet", "exactly_once": False},          # Parquet chunks
     DEFAULT_REF_ABOVE_BYTES),
    ({"sink": "parquet", "exactly_once": False, "txn_chunk_rows": 0}, 0),
])
def test_references_are_asked_only_where_the_keeper_streams_them(overrides, expected):
    assert TaskSettings(cluster_id=1, **overrides).ref_above == expected


# -- the feed and the merge: a reference is an opaque item ---------------------------------

class _PullCalls:
    def __init__(self):
        self.kw: list[dict] = []

    def pull(self, actor, since, max_bytes, timeout_s, **kw):
        self.kw.append(kw)
        return ("batch", since + 1), ("wm", since + 1)

    def ready(self, refs, timeout_s):
        return set(refs)

    def get(self, ref, what):
        kind, ts = ref
        return [(ts, BinlogRef("pump-1", ts, ts - 1, 10 << 20))] if kind == "batch" else ts


def test_the_pull_asks_for_references_only_when_set():
    for ref_above, expected in [(0, {}), (64 << 10, {"ref_above": 64 << 10})]:
        calls = _PullCalls()
        src = ActorPumpSource("pump", calls=calls, ref_above=ref_above)
        src.fetch(0)
        src.start_fetch(1)
        src.poll()
        assert calls.kw and all(kw == expected for kw in calls.kw)


def test_the_merge_hands_a_reference_on_untouched():
    ref = BinlogRef("pump-1", BIG_TS, BIG_TS - 1, 10 << 20)
    assert len(ref) >= OUT_OF_BAND_BYTES  # large, yet never wrapped as a buffer
    merger = Merger(0)
    merger.add_source("pump-1")
    merger.add_source("pump-2")
    merger.push("pump-1", [(50, b"small"), (BIG_TS, ref)], BIG_TS)
    merger.push("pump-2", [], BIG_TS)
    ready = merger.pop_ready_pairs(10)
    assert ready == [(50, b"small"), (BIG_TS, ref)]
    items = routed_items(ready)
    assert type(items) is bytes and len(items) < 1000  # packed: the reference, not 10 MiB
    assert keeper_items(items) == [(50, b"small"), (BIG_TS, ref)]
    # beside a payload that does go out of band, the reference stays as it is
    big = b"x" * OUT_OF_BAND_BYTES
    items = routed_items([(40, big), (BIG_TS, ref)])
    assert type(items) is list and items[1] == (BIG_TS, ref)
    assert keeper_items(items)[1] == (BIG_TS, ref)


# -- the keeper ----------------------------------------------------------------------------

class _Source:
    """A ByteSource over a payload, counting reads, failing from read ``fail_at`` on."""

    def __init__(self, payload: bytes, fail_at: int | None = None):
        self._inner = BytesSource(payload)
        self.size = self._inner.size
        self.reads: list[tuple[int, int]] = []
        self.fail_at = fail_at

    def read(self, offset, n):
        if self.fail_at is not None and len(self.reads) >= self.fail_at:
            raise UnavailableError("pump pump-1: the pump actor is unavailable")
        self.reads.append((offset, n))
        return self._inner.read(offset, n)


def _keeper(payloads: dict, sources: list, chunk_rows: int = 4,
            source_kw: dict | None = None) -> RowKeeper:
    """A routed row keeper whose references open as :class:`_Source` (kept in ``sources``)."""
    keeper = RowKeeper(TaskSettings(cluster_id=1, worker_count=3, txn_chunk_rows=chunk_rows),
                       _Meta(_history()), 3,
                       open_ref=lambda ref: _open(ref, payloads, sources, source_kw or {}))
    keeper.reset(3)
    return keeper


def _open(ref, payloads, sources, kw):
    source = _Source(payloads[ref.commit_ts], **kw)
    sources.append(source)
    return source


def _items(as_ref: bool):
    small = bl.encode(commit_with([inserts(100, 101)], commit_ts=50))
    big = bl.encode(commit_with([inserts(0, 10)], commit_ts=BIG_TS))
    after = bl.encode(commit_with([inserts(200, 201)], commit_ts=70))
    ref = BinlogRef("pump-1", BIG_TS, BIG_TS - 1, len(big))
    items = [(50, small), (BIG_TS, ref if as_ref else big), (70, after)]
    return items, {BIG_TS: big}


def _run(keeper, items):
    calls = [_call(keeper, items)]
    while calls[-1][2]:
        calls.append(_call(keeper, []))
    return calls


@pytest.fixture
def small_window(monkeypatch):
    """The keeper walks a referenced binlog through 16-byte windows (many reads)."""
    import tidb_binlog.drainer.translate.payload_read as payload_read_module

    monkeypatch.setattr(payload_read_module, "REF_WINDOW_BYTES", 16)


def test_a_reference_is_read_chunk_by_chunk_with_the_same_plan_as_the_payload(small_window):
    items, payloads = _items(as_ref=False)
    expected = _run(_keeper(payloads, []), items)
    sources: list[_Source] = []
    keeper = _keeper(payloads, sources)
    items, _ = _items(as_ref=True)
    got = _run(keeper, items)
    assert got == expected and len(got) == 4  # small + chunk 1, chunk 2, last chunk, after
    assert len(sources) == 1 and sources[0].reads
    assert max(n for _, n in sources[0].reads) < len(payloads[BIG_TS]) // 2  # never whole
    stats = keeper.ref_stats
    assert stats["refs"] == 1 and stats["whole"] == 0
    assert stats["reads"] == len(sources[0].reads)
    assert stats["bytes"] == sum(n for _, n in sources[0].reads)


def test_a_pump_gone_mid_read_is_a_pipeline_reset_and_the_replay_converges(small_window):
    items, payloads = _items(as_ref=False)
    expected = _run(_keeper(payloads, []), items)
    sources: list[_Source] = []
    keeper = _keeper(payloads, sources, source_kw={"fail_at": 4})
    items, _ = _items(as_ref=True)
    with pytest.raises(PipelineReset, match="pump pump-1 went away .* commit_ts 60"):
        _run(keeper, items)
    keeper.reset(3)  # the pipeline's reset; the replay brings the items again
    sources.clear()
    keeper._open_ref = lambda ref: _open(ref, payloads, sources, {})
    assert _run(keeper, items) == expected


def test_whole_paths_read_a_reference_whole_with_todays_result():
    """``txn-chunk-rows = 0`` (or any path that takes a transaction whole): read whole
    through the source, the same translation as the payload."""
    items, payloads = _items(as_ref=False)
    expected = _keeper(payloads, [], chunk_rows=0).translate(items)
    sources: list[_Source] = []
    keeper = _keeper(payloads, sources, chunk_rows=0)
    items, _ = _items(as_ref=True)
    assert keeper.translate(items) == expected
    assert keeper.ref_stats["whole"] == 1 and sources[0].reads == [(0, sources[0].size)]


def test_translate_or_chunk_over_a_source_matches_the_bytes():
    payload = bl.encode(commit_with([inserts(0, 10)], commit_ts=BIG_TS))
    _, chunks = translate_or_chunk(translator(), payload, 3)
    _, from_source = translate_or_chunk(translator(), _Source(payload), 3)
    assert list(from_source) == list(chunks)
    small = bl.encode(commit_with([inserts(0, 2)], commit_ts=BIG_TS))
    txn, none = translate_or_chunk(translator(), _Source(small), 1000)  # small: whole
    assert none is None and txn == translator().translate(bl.decode(small))
    with pytest.raises(InvalidArgument, match="unopened"):
        translate_or_chunk(translator(), BinlogRef("p", 1, 0, 10), 3)


def test_a_keeper_without_open_ref_refuses_a_reference_clearly():
    keeper = RowKeeper(TaskSettings(cluster_id=1, worker_count=3), _Meta(_history()), 3)
    keeper.reset(3)
    items, _ = _items(as_ref=True)
    with pytest.raises(InvalidArgument, match="large-binlog-bytes = 0"):
        _run(keeper, items)


def test_the_driver_asks_for_references_only_from_pumps_the_keeper_can_find():
    """The keeper finds a pump by its name in the task's namespace; a pump it could not
    find (a handle passed in, another namespace) is pulled whole."""
    from types import SimpleNamespace

    from tidb_binlog.drainer.pipeline.driver import TaskDriver

    looked_up = []

    def find_actor(name, namespace):
        looked_up.append((name, namespace))
        return object() if name == "pump-named" else None

    settings = TaskSettings(cluster_id=1, namespace="ns", large_binlog_bytes=1 << 20)
    driver = SimpleNamespace(settings=settings, calls=SimpleNamespace(find_actor=find_actor))
    assert TaskDriver._ref_above(driver, "named") == 1 << 20
    assert TaskDriver._ref_above(driver, "handle-only") == 0
    assert looked_up == [("pump-named", "ns"), ("pump-handle-only", "ns")]
    driver.settings = TaskSettings(cluster_id=1, large_binlog_bytes=0)
    assert TaskDriver._ref_above(driver, "named") == 0  # off: nothing looked up
    assert len(looked_up) == 2
