"""``tidb-binlog binlogctl``: TiDB Binlog's operations tool against the registry on Ray.

    tidb-binlog binlogctl -cmd pumps [-show-offline-nodes] [--ray-address HOST:PORT]
    tidb-binlog binlogctl -cmd drainers
    tidb-binlog binlogctl -cmd offline-pump -node-id pump-1 [--wait 120]
    tidb-binlog binlogctl -cmd update-drainer -node-id d1 -state offline
    tidb-binlog binlogctl -cmd generate_meta -data-dir binlog_position
    tidb-binlog binlogctl -cmd encrypt -text 'secret'

TiDB's flags work with one dash or two. Instead of PD it joins the Ray cluster
(``--ray-address``, else ``$RAY_ADDRESS``, else the Ray running on this host)
and finds the registry actor (``--namespace``, default tidb-binlog, or
``--registry "<namespace>[/<actor>]"`` as in pump.toml/drainer.toml). Pause and
offline are sent to the node's HTTP API (its address port + 1, or
``--status-addr``). The tables show how far each pump and drainer is behind.
"""

from __future__ import annotations

import logging
import os
import ssl
import sys

from tidb_binlog.binlogctl.commands import Binlogctl
from tidb_binlog.binlogctl.flags import add_arguments, options_from_args
from tidb_binlog.config import DEFAULT_REGISTRY_NAME, split_registry
from tidb_binlog.errors import ConfigError

__all__ = ["register", "run"]

log = logging.getLogger("tidb_binlog.binlogctl")


def register(sub) -> None:
    p = sub.add_parser("binlogctl", help="list pumps/drainers and their lag, pause or offline "
                       "them, update states, generate_meta, encrypt passwords",
                       description=__doc__.split("\n\n", 2)[2])
    add_arguments(p)
    p.set_defaults(func=run)


def _ssl_context(args) -> ssl.SSLContext | None:
    if not (args.ssl_ca or args.ssl_cert):
        return None
    try:
        ctx = ssl.create_default_context(cafile=args.ssl_ca or None)
        if args.ssl_cert:
            ctx.load_cert_chain(args.ssl_cert, args.ssl_key or None)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"cannot load -ssl-ca/-ssl-cert/-ssl-key: {exc}",
                          key="ssl-ca") from exc
    return ctx


def _registry_factory(args):
    """A callable joining Ray and returning the registry client (called only when a
    command needs the registry)."""
    namespace, name = args.namespace or "tidb-binlog", DEFAULT_REGISTRY_NAME
    if args.registry:
        try:
            namespace, name = split_registry(args.registry)
        except Exception as exc:
            raise ConfigError(f"--registry {args.registry!r}: expected {exc}",
                              key="registry") from None
    address = args.ray_address or os.environ.get("RAY_ADDRESS") or "auto"

    def connect():
        # cluster/ imports ray: not at module level, the pure core (tidb_binlog/) must
        # import without ray (tests/unit/test_pure_core.py) and --help stay fast
        from cluster.registry import join_registry

        return join_registry(namespace=namespace, name=name, address=address)

    return connect


def run(args) -> int:
    if args.pd_urls:
        print("binlogctl: note: -pd-urls is ignored; the registry actor on Ray is used "
              "(--ray-address, --namespace, --registry)", file=sys.stderr)
    opts = options_from_args(args)
    ctl = Binlogctl(_registry_factory(args), ssl_context=_ssl_context(args))
    return ctl.run(opts)
