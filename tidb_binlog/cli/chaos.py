"""``tidb-binlog chaos``: the demo's pipeline plus a bank workload under a seeded
schedule of faults; exits 1 on any diff, lost or duplicated row, unrecovered fault or
broken invariant, leaving a run directory to replay it (see cluster/chaos.py)."""

from __future__ import annotations

import argparse

from tidb_binlog.chaos import FAULT_KINDS, parse_kinds
from tidb_binlog.cli.demo import positive_int, positive_seconds
from tidb_binlog.errors import ConfigError


def fault_kinds(text: str) -> tuple[str, ...]:
    try:
        return parse_kinds(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(exc.message) from None


def register(sub) -> None:
    p = sub.add_parser(
        "chaos",
        help="soak the demo's pipeline under seeded faults and check nothing is lost",
        description="Start the demo's stack, run its workloads plus a bank-transfer workload, "
                    "and inject a seeded schedule of faults one at a time (kill -9 of every "
                    "actor kind and of both MariaDB servers, Ray restarts, SIGSTOP of a pump, "
                    "a pump's disk guard tripping, a pump paused over HTTP). At the end: "
                    "compare every table, check the bank's total up- and downstream and the "
                    "downstream audit log, print 'RESULT chaos faults= diff= lost= dup= "
                    "recovery_p99_s='. Exit 1 on any failure; the run directory then keeps "
                    "the schedule, the logs and the replay command.")
    p.add_argument("--duration", type=positive_seconds, default=300.0, metavar="SECONDS",
                   help="how long faults are injected (default 300)")
    p.add_argument("--seed", type=int, required=True, help="seed of the fault schedule")
    p.add_argument("--workers", type=positive_int, default=4, help="drainer SQL workers (4)")
    p.add_argument("--faults", type=fault_kinds, default=None, metavar="KIND,...",
                   help=f"only these fault kinds (default all: {', '.join(FAULT_KINDS)})")
    p.add_argument("--recovered-lag", type=positive_seconds, default=1.0, metavar="SECONDS",
                   help="a fault is recovered from once the drainer's lag is under this (1)")
    p.add_argument("--fault-timeout", type=positive_seconds, default=120.0, metavar="SECONDS",
                   help="a fault not recovered from within this fails the run (120)")
    p.add_argument("--work-dir", default=None,
                   help="run directory (default: a temporary one, removed after a pass)")
    p.add_argument("--keep", action="store_true", help="keep the run directory after a pass")
    p.set_defaults(func=run)


def run(args) -> int:
    # cluster/ imports ray: not at module level, the pure core (tidb_binlog/) must
    # import without ray (tests/unit/test_pure_core.py) and --help stay fast
    from cluster.chaos import run_chaos

    return run_chaos(args.duration, args.seed, workers=args.workers, kinds=args.faults,
                     work_dir=args.work_dir, keep=args.keep,
                     recovered_lag_s=args.recovered_lag, fault_timeout_s=args.fault_timeout)
