"""The ``tidb-binlog`` console command.

Each subcommand lives in its own module under ``tidb_binlog.cli`` and exposes
``register(subparsers)``, which adds its parser and sets ``func`` to a callable
taking the parsed arguments and returning an exit code. Modules import their
heavy dependencies (ray, grpc, pymysql) inside that callable, so ``--help`` is
fast and the pure core stays importable without Ray.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from tidb_binlog import __version__
from tidb_binlog.errors import BinlogError
from tidb_binlog.logs import FORMAT_ENV, LOG_FORMATS, setup_logging

# Subcommand modules, in the order `--help` lists them. A module that does not
# exist yet is skipped, so the command grows as the parts land.
SUBCOMMANDS = ["pump", "drainer", "binlogctl", "reparo", "parquet_compact", "demo", "chaos",
               "spark", "version"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tidb-binlog",
        description="TiDB Binlog on Ray: pumps store binlogs, drainers replicate them.",
    )
    parser.add_argument("--version", action="version", version=f"tidb-binlog-ray {__version__}")
    parser.add_argument("-L", "--log-level", default="info",
                        choices=["debug", "info", "warn", "error"], help="log level (default info)")
    parser.add_argument("--log-format", choices=LOG_FORMATS, default=None,
                        help=f"log lines as text (default) or one JSON object each; default "
                             f"${FORMAT_ENV}, else text")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMANDS:
        try:
            module = importlib.import_module(f"tidb_binlog.cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"tidb_binlog.cli.{name}":
                continue
            raise
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    level = {"warn": "WARNING"}.get(args.log_level, args.log_level.upper())
    setup_logging("", fmt=args.log_format, level=level)  # the pump stamps its node id
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except BinlogError as exc:
        print(f"tidb-binlog {args.command}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
