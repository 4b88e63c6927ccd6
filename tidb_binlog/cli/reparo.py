"""`tidb-binlog reparo`: restore a drainer's file-sink directory into MySQL/TiDB, or print it.

    tidb-binlog reparo --config reparo.toml                       # everything in data-dir
    tidb-binlog reparo --config reparo.toml --stop-tso 4635...    # up to a point in time
    tidb-binlog reparo --data-dir data.drainer                    # print it (dest-type print)

TiDB Binlog's reparo: it reads the pb binlog files the drainer's file sink wrote
(db-type = "file") in commit order, keeps the records whose commit_ts lies in
[start, stop] (start-tso/stop-tso, or start-datetime/stop-datetime in the host's
local time, "2006-01-02 15:04:05") and the tables the replicate-do/ignore rules
keep, and applies them to [dest-db] (dest-type = "mysql": worker-count
connections, txn-batch row changes per transaction, safe-mode for REPLACE) or prints
them (dest-type = "print"). The downstream must already hold the tables as of the
start (the snapshot the drainer started from). Prints a summary on stderr (also before
an error, when records were read); exit 0 when everything in range was applied, 1 on an
error (it names the file and offset of a damaged record, the commit_ts of a refused
statement, and up to where the downstream is restored; every record before a damaged
one is applied first), 2 on a bad command line. A newest file ending in a record cut
short (a torn tail) is an error too, naming the file, the offset and the last
commit_ts restored, unless a drainer is writing that file (it holds the directory's
.lock: a write in progress, noted in the summary) or --allow-torn-tail accepts it.
Keys: reparo.toml, "reparo" in tidb_binlog/CONFIG.md.
"""

from __future__ import annotations

import argparse
import logging
import sys

__all__ = ["register", "run"]

log = logging.getLogger("tidb_binlog.reparo")

# flag -> reparo.toml key; flags override the file.
_FLAG_KEYS = {
    "data_dir": "data-dir",
    "dest_type": "dest-type",
    "start_datetime": "start-datetime",
    "stop_datetime": "stop-datetime",
    "start_tso": "start-tso",
    "stop_tso": "stop-tso",
    "txn_batch": "txn-batch",
    "worker_count": "worker-count",
    "safe_mode": "safe-mode",
    "skip_corrupt": "skip-corrupt",
    "allow_torn_tail": "allow-torn-tail",
    "large_record_bytes": "large-record-bytes",
    "log_file": "log-file",
}


def register(sub) -> None:
    p = sub.add_parser("reparo", help="restore file-sink binlog files into MySQL/TiDB, or "
                       "print them", description=__doc__.split("\n\n", 1)[1],
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", "-config", help="reparo.toml (see config/reparo.toml)")
    p.add_argument("--data-dir", "-data-dir", help="the file sink's directory (drainer.toml "
                   "[syncer.to] dir)")
    p.add_argument("--dest-type", "-dest-type", choices=["print", "mysql"],
                   help="print the records, or apply them to [dest-db] (default print)")
    p.add_argument("--start-datetime", "-start-datetime", metavar="'YYYY-MM-DD HH:MM:SS'",
                   help="restore from this local time (default: the first record)")
    p.add_argument("--stop-datetime", "-stop-datetime", metavar="'YYYY-MM-DD HH:MM:SS'",
                   help="restore up to this local time, included (default: the last record)")
    p.add_argument("--start-tso", "-start-tso", type=int, metavar="TSO",
                   help="restore records with commit_ts >= TSO")
    p.add_argument("--stop-tso", "-stop-tso", type=int, metavar="TSO",
                   help="restore records with commit_ts <= TSO")
    p.add_argument("--txn-batch", "-txn-batch", type=int, metavar="N",
                   help="row changes per downstream transaction (default 20)")
    p.add_argument("-c", "--worker-count", dest="worker_count", type=int, metavar="N",
                   help="parallel downstream connections (default 16)")
    p.add_argument("--safe-mode", "-safe-mode", action="store_const", const=True,
                   help="INSERT as REPLACE, UPDATE as DELETE + REPLACE: a rerun over rows "
                   "already restored converges")
    p.add_argument("--skip-corrupt", action="store_const", const=True,
                   help="skip damaged records (each reported with file and offset) instead "
                   "of stopping at the first")
    p.add_argument("--allow-torn-tail", action="store_const", const=True,
                   help="accept a record cut short at the end of the newest file when no "
                   "drainer is writing it (a crash mid-write, a copy taken while it wrote): "
                   "reported in the summary, exit 0; without it that is an error")
    p.add_argument("--large-record-bytes", metavar="SIZE",
                   help="a record (one upstream transaction) of this size or more, e.g. "
                   "8388608 or '8 MiB', is read in place and applied in chunks of "
                   "txn-batch x worker-count rows, never held whole (default 8 MiB; 0: "
                   "read every record whole)")
    p.add_argument("--log-file", "-log-file", help="also write the log to this file")
    p.set_defaults(func=run)


def run(args) -> int:
    # Deferred (start-up time): `tidb-binlog --help` should not load the codec and drainer.
    from tidb_binlog.config.reparo import load_reparo_config
    from tidb_binlog.errors import BinlogError  # deferred (start-up time), as above
    from tidb_binlog.reparo.runner import (  # deferred (start-up time), as above
        ReparoResult,
        run_reparo,
        summary_lines,
    )

    overrides = {key: getattr(args, flag) for flag, key in _FLAG_KEYS.items()
                 if getattr(args, flag, None) is not None}
    cfg = load_reparo_config(args.config, overrides)
    _configure_logging(cfg.log_level, cfg.log_file)
    log.info("reparo: data-dir %s, dest-type %s%s", cfg.data_dir, cfg.dest_type,
             f", dest-db {cfg.dest_db.where()}" if cfg.dest_type == "mysql" else "")
    result = ReparoResult()
    try:
        run_reparo(cfg, result=result)
    except BinlogError:
        if result.records or result.torn_tail is not None:  # what was restored before it
            _summary(summary_lines(result))
        raise
    _summary(summary_lines(result))
    return 0


def _summary(lines: list[str]) -> None:
    sys.stdout.flush()
    for line in lines:
        print(line, file=sys.stderr)


def _configure_logging(level: str, log_file: str) -> None:
    """reparo.toml's log-level and log-file (the -L flag before the command sets the
    level until the file is read)."""
    name = {"warn": "WARNING", "fatal": "CRITICAL"}.get(level.lower(), level.upper())
    root = logging.getLogger()
    root.setLevel(name)
    if log_file:
        handler = logging.FileHandler(log_file)
        handler.setFormatter(logging.Formatter(
            "[%(asctime)s] [%(levelname)s] [%(name)s] %(message)s"))
        root.addHandler(handler)
