"""Which Ray cluster a drainer joins, and joining it: ``--ray-address``, ``$RAY_ADDRESS``,
the cluster ``ray start`` recorded on this host, or a new local Ray; the registry found in
drainer.toml's ``registry`` namespace.

A join that cannot work fails at once with what to set (nothing answering at a host:port,
a cluster that wants an auth token): ``ray.init`` itself would retry for a long time and
then report only "Failed to connect". :mod:`cluster.api` words its own join failures with
:func:`is_auth_failure`, :func:`token_hint` and :func:`first_line`.
"""

from __future__ import annotations

import logging
import os
import socket

from actors.ray_calls import RayCalls
from cluster.registry import REGISTRY_NAME, connect_registry
from tidb_binlog.config import split_registry
from tidb_binlog.drainer.pipeline.names import DEFAULT_NAMESPACE
from tidb_binlog.errors import UnavailableError

__all__ = ["join_cluster", "choose_ray_address", "is_auth_failure", "token_hint",
           "first_line"]

log = logging.getLogger(__name__)


def join_cluster(cfg, *, ray_address: str | None = None):
    """``(registry client, namespace)`` for drainer.toml's ``registry``, on Ray.

    Which Ray, as ``ray.init()`` chooses (:func:`choose_ray_address`): ``ray_address``
    (``--ray-address``), else ``$RAY_ADDRESS``, else the cluster ``ray start`` recorded
    on this host, else a new local Ray. ``"auto"`` (join whatever Ray runs on this host)
    only when given explicitly. The log says which cluster was joined and why. A
    host:port where nothing answers, or a cluster asking for an auth token, is an
    :class:`UnavailableError` saying what to set, at once.
    ``registry = "<namespace>[/<actor name>]"`` names the registry actor ("" =
    namespace ``tidb-binlog``, the default actor name).
    """
    namespace, name = split_registry(cfg.registry) or (DEFAULT_NAMESPACE, REGISTRY_NAME)
    if not RayCalls.is_initialized():
        address, why = choose_ray_address(ray_address, os.environ.get("RAY_ADDRESS"),
                                          _recorded_ray_cluster())
        if address is not None and why == _RECORDED and _refused(address) is not None:
            log.warning("the Ray cluster `ray start` recorded on this host (%s) does not "
                        "answer: starting a local Ray instead", address)
            address, why = None, "the recorded `ray start` cluster is gone"
        if address is None:
            log.info("starting a local Ray (%s; set --ray-address or $RAY_ADDRESS to join "
                     "a cluster)", why)
            RayCalls.init(address="local", namespace=namespace, log_to_driver=False,
                          include_dashboard=False)
        else:
            _init_ray(address, why, namespace)
        log.info("joined the Ray cluster at %s (%s), namespace %r",
                 RayCalls.gcs_address(), why, namespace)
    return connect_registry(namespace=namespace, name=name), namespace


_RECORDED = "the cluster `ray start` recorded on this host"


def choose_ray_address(flag: str | None, env_value: str | None,
                       recorded: str | None) -> tuple[str | None, str]:
    """``(address, why)``: the Ray cluster to join and where that choice came from, or
    ``(None, why)`` to start a local Ray: ``ray.init()``'s order, with ``"auto"``
    honoured only when it was given."""
    if flag:
        return flag, "from --ray-address"
    if env_value:
        return env_value, "from $RAY_ADDRESS"
    if recorded:
        return recorded, _RECORDED
    return None, "no --ray-address, no $RAY_ADDRESS, no `ray start` cluster on this host"


def _recorded_ray_cluster() -> str | None:
    return RayCalls.recorded_cluster()


def _refused(address: str, timeout_s: float = 5.0) -> str | None:
    """Why nothing answers at a ``host:port`` Ray address (None: something does, or the
    address is not host:port). ``ray.init`` itself retries such an address for a long
    time, printing its own warnings, before it gives up."""
    if address == "auto" or "://" in address:
        return None
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        return None
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            return None
    except OSError as exc:
        return exc.strerror or str(exc)


def _init_ray(address: str, why: str, namespace: str) -> None:
    fix = ("check --ray-address / $RAY_ADDRESS (the cluster's GCS host:port, as `ray start "
           "--head` prints it), or unset both to start a local Ray")
    reason = _refused(address)
    if reason is not None:
        raise UnavailableError(f"cannot join the Ray cluster at {address!r} ({why}): nothing "
                               f"answers there ({reason}); {fix}")
    try:
        RayCalls.init(address=address, namespace=namespace, log_to_driver=False)
    except Exception as exc:
        if is_auth_failure(exc):
            raise UnavailableError(
                f"the Ray cluster at {address!r} ({why}) refused us: it requires token "
                "authentication; set RAY_AUTH_MODE=token and the cluster's token in "
                "RAY_AUTH_TOKEN (or a file named by RAY_AUTH_TOKEN_PATH, or "
                "~/.ray/auth_token), then start the drainer again") from exc
        if isinstance(exc, ConnectionError):
            raise UnavailableError(f"cannot join the Ray cluster at {address!r} ({why}): "
                                   f"{first_line(exc)}; {fix}{token_hint()}") from exc
        raise


def is_auth_failure(exc: BaseException) -> bool:
    """Whether ``ray.init`` failed because the cluster wants a token we did not give
    (Ray raises AuthenticationError, or a ConnectionError naming the refusal)."""
    if type(exc).__name__ == "AuthenticationError":
        return True
    text = str(exc).lower()
    return "unauthenticated" in text or "auth token" in text or "authentication" in text


def token_hint(env=None, home: str | None = None) -> str:
    """What to add when a join failed and this process has no Ray token: a cluster with
    token authentication refuses such a driver, and Ray 2.60's ConnectionError then says
    only "Failed to connect to Ray cluster" (the refusal is in Ray's C++ log lines)."""
    env = os.environ if env is None else env
    token_file = os.path.join(home or os.path.expanduser("~"), ".ray", "auth_token")
    if (env.get("RAY_AUTH_MODE", "").lower() == "token" or env.get("RAY_AUTH_TOKEN")
            or env.get("RAY_AUTH_TOKEN_PATH") or os.path.exists(token_file)):
        return ""
    return ("; if the cluster uses token authentication, set RAY_AUTH_MODE=token and its "
            "token in RAY_AUTH_TOKEN (or a file named by RAY_AUTH_TOKEN_PATH, or "
            "~/.ray/auth_token)")


def first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__
