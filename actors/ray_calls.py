"""Every Ray API call the drainer's actors make, in one place (unit tests never start Ray)."""

from __future__ import annotations

import time

from tidb_binlog.errors import BinlogError

__all__ = ["RayCalls", "PipelineReset"]


class PipelineReset(BinlogError):
    """An actor of the pipeline restarted: replay from the durable checkpoint."""


class RayCalls:
    """Every Ray API call the drainer actors make."""

    @staticmethod
    def call(actor, method: str, *args):
        return getattr(actor, method).remote(*args)

    @staticmethod
    def call_n(actor, method: str, num_returns: int, *args) -> list:
        """A call whose result is ``num_returns`` objects (one ref each)."""
        refs = getattr(actor, method).options(num_returns=num_returns).remote(*args)
        return list(refs) if num_returns > 1 else [refs]

    @staticmethod
    def has_method(actor, method: str) -> bool:
        """Whether an actor handle (or a plain object) offers ``method``."""
        try:
            getattr(actor, method)
        except AttributeError:
            return False
        return True

    @staticmethod
    def pull(pump, since_ts: int, max_bytes: int):
        return tuple(pump.pull.options(num_returns=2).remote(since_ts, max_bytes, 0.5))

    @staticmethod
    def get(ref):
        import ray

        try:
            return ray.get(ref)
        except ray.exceptions.RayTaskError as exc:
            cause = exc
            while isinstance(cause, ray.exceptions.RayTaskError) and cause.cause is not None:
                cause = cause.cause  # a task whose argument (another task) failed nests
            if isinstance(cause, BinlogError):
                raise cause from None
            if isinstance(cause, (ray.exceptions.RayActorError,
                                  ray.exceptions.ActorUnavailableError,
                                  ray.exceptions.ObjectLostError)):
                raise PipelineReset(f"a pipeline actor is unavailable: {cause}") from exc
            raise
        except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError,
                ray.exceptions.ObjectLostError) as exc:
            # ObjectLostError: a routed payload whose owner (the merger) died
            raise PipelineReset(f"a pipeline actor is unavailable: {exc}") from exc

    @staticmethod
    def ready(ref) -> bool:
        import ray

        done, _ = ray.wait([ref], timeout=0)
        return bool(done)

    @staticmethod
    def wait(refs: list, timeout_s: float | None, all_ready: bool = False) -> list:
        """The first ref to be ready (within ``timeout_s``); with ``all_ready``, every
        ref ready by then (``timeout_s = 0``: those ready now)."""
        import ray

        done, _ = ray.wait(refs, num_returns=len(refs) if all_ready else 1,
                           timeout=timeout_s)
        return done

    @staticmethod
    def wait_any(refs: list, timeout_s: float) -> None:
        if refs:
            import ray

            ray.wait(refs, num_returns=1, timeout=timeout_s)
        else:
            time.sleep(timeout_s)

    @staticmethod
    def is_actor_died(exc: BaseException) -> bool:
        import ray

        return isinstance(exc, (ray.exceptions.RayActorError,
                                ray.exceptions.ActorUnavailableError))
