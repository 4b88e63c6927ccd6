"""The session Ray: a trivial actor round trip."""

from __future__ import annotations


def test_actor_round_trip(ray_local):
    ray = ray_local

    @ray.remote
    class Echo:
        def __init__(self, prefix: str):
            self.prefix = prefix

        def echo(self, payload: bytes) -> bytes:
            return self.prefix.encode() + payload

    actor = Echo.remote("pid-")
    assert ray.get(actor.echo.remote(b"x" * 10)) == b"pid-" + b"x" * 10
    assert ray.get_runtime_context().namespace == "tidb-binlog-test"
    ray.kill(actor)


def test_tasks_run_in_other_processes(ray_local):
    import os

    ray = ray_local

    @ray.remote
    def whoami() -> int:
        return os.getpid()

    assert ray.get(whoami.remote()) != os.getpid()
    assert ray.cluster_resources()["CPU"] == 4
