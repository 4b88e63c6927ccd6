"""binlogctl's flags: TiDB Binlog's names, single-dash (``-cmd pumps``) or double-dash.

TiDB's binlogctl uses Go's flag package, where ``-cmd`` and ``--cmd`` are the same
flag; argparse takes both spellings when both are declared, so scripts written
for TiDB's binlogctl run unchanged. ``-pd-urls`` is accepted and ignored with a
note (ours reaches the registry actor on Ray: ``--ray-address``, ``--namespace``
or ``--registry``).
"""

from __future__ import annotations

import argparse

from tidb_binlog.binlogctl.commands import COMMANDS, Options

__all__ = ["add_arguments", "options_from_args"]


def _flag(p: argparse.ArgumentParser, name: str, **kw) -> None:
    p.add_argument(f"--{name}", f"-{name}", **kw)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Declare every flag on ``p`` (the ``tidb-binlog binlogctl`` subparser)."""
    _flag(p, "cmd", default="pumps", metavar="CMD",
          help=f"operation: {', '.join(COMMANDS)} (default pumps)")
    _flag(p, "node-id", default="", help="node id for update-*/pause-*/offline-*")
    _flag(p, "state", default="", help="new state for update-pump/update-drainer: online, "
          "pausing, paused, closing or offline")
    _flag(p, "show-offline-nodes", action="store_true",
          help="list offline nodes too (pumps/drainers)")
    _flag(p, "data-dir", default="binlog_position", help="generate_meta: where the savepoint "
          "file goes (default binlog_position)")
    _flag(p, "time-zone", default="", help="generate_meta: also note the time in this zone")
    _flag(p, "text", default="", help="encrypt: the text (password) to encrypt")
    _flag(p, "pd-urls", default="", help="TiDB's PD address: accepted and ignored (ours uses "
          "the registry actor on Ray)")
    _flag(p, "ssl-ca", default="", help="CA file: talk HTTPS to the nodes' HTTP API")
    _flag(p, "ssl-cert", default="", help="client certificate for HTTPS")
    _flag(p, "ssl-key", default="", help="client key for HTTPS")
    _flag(p, "ray-address", default=None, help="Ray cluster to join (default $RAY_ADDRESS, "
          "else 'auto': the Ray running on this host)")
    _flag(p, "namespace", default=None, help="Ray namespace of the registry actor (default "
          "tidb-binlog)")
    _flag(p, "registry", default="", help='registry actor "<ray namespace>[/<actor name>]" '
          "as in pump.toml / drainer.toml (overrides --namespace)")
    _flag(p, "status-addr", default="", help="pause/offline: the node's HTTP host:port "
          "(default its registered address with port + 1)")
    _flag(p, "wait", type=float, default=0.0, metavar="SECONDS",
          help="pause/offline: wait up to SECONDS for the record to reach paused/offline")


def options_from_args(args: argparse.Namespace) -> Options:
    return Options(cmd=args.cmd, node_id=args.node_id, state=args.state,
                   show_offline_nodes=args.show_offline_nodes, data_dir=args.data_dir,
                   time_zone=args.time_zone, text=args.text, status_addr=args.status_addr,
                   wait_s=args.wait)
