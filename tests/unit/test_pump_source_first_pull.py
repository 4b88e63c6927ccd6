"""ActorPumpSource's first pull of a chain is small (the merge starts sooner)."""

from __future__ import annotations

from tidb_binlog.drainer.source.pump_source import ActorPumpSource


class Calls:
    """Pulls resolve at once with one item above ``since``; records max_bytes asked."""

    def __init__(self):
        self.asked: list[int] = []

    def pull(self, actor, since, max_bytes, timeout_s):
        self.asked.append(max_bytes)
        return ("batch", since + 1), ("wm", since + 1)

    def ready(self, refs, timeout_s):
        return set(refs)

    def get(self, ref, what):
        kind, ts = ref
        return [(ts, b"p")] if kind == "batch" else ts


def test_the_first_pull_of_a_chain_is_small_then_max_bytes():
    calls = Calls()
    src = ActorPumpSource("pump", calls=calls, max_bytes=4 << 20, max_outstanding=2,
                          first_max_bytes=64 << 10)
    src.start_fetch(0)
    for _ in range(3):
        src.poll()
    assert calls.asked[0] == 64 << 10 and set(calls.asked[1:]) == {4 << 20}
    src.close()  # a chain started again (after a failure, a reset) begins small again
    src.start_fetch(10)
    assert calls.asked[-1] == 64 << 10


def test_without_first_max_bytes_every_pull_asks_max_bytes():
    calls = Calls()
    src = ActorPumpSource("pump", calls=calls, max_bytes=1 << 20, max_outstanding=2)
    src.start_fetch(0)
    src.poll()
    assert set(calls.asked) == {1 << 20}
