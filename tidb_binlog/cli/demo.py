"""``tidb-binlog demo``: the whole path end to end on this machine, then a full comparison.

Arguments are checked here, before anything starts: a demo of ``--duration 0`` or
``--workers 0`` would start Ray and two MariaDB servers only to prove nothing (an
empty run compares equal), so argparse refuses them with a message naming the flag.
"""

from __future__ import annotations

import argparse

KNOBS_HELP = "drop_commit_binlog, crash_after_prewrite, fail_prewrite"


def positive_seconds(text: str) -> float:
    """argparse type: a number of seconds above 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not value > 0:  # also refuses nan
        raise argparse.ArgumentTypeError(
            f"must be more than 0 seconds, got {text}: an empty run proves nothing")
    return value


def positive_int(text: str) -> int:
    """argparse type: an integer of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def fault_knob(text: str) -> tuple[str, int]:
    """argparse type: ``KNOB=COUNT`` for :class:`tidb_binlog.upstream.faults.Faults`."""
    # start-up time: the tidb_binlog.upstream package (pymysql, grpc) adds ~0.2 s to
    # every `tidb-binlog` command; only a demo given --upstream-fault needs it
    from tidb_binlog.upstream.faults import KNOBS

    knob, sep, count = text.partition("=")
    if knob not in KNOBS:
        raise argparse.ArgumentTypeError(f"unknown fault knob {knob!r}; known: {', '.join(KNOBS)}")
    try:
        n = int(count) if sep else 1
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: COUNT must be a whole number (-1 = every transaction)") from None
    return knob, n


def register(sub) -> None:
    p = sub.add_parser(
        "demo",
        help="run upstream → pumps → drainer → downstream on local Ray and compare",
        description="Start a local Ray, the registry/TSO, two pumps, throwaway upstream and "
                    "downstream MariaDB servers and a drainer; run the upstream workloads "
                    "(mixed DML, DDL, all types, no-PK tables) while showing progress; then "
                    "compare every table. Exits 1 when upstream and downstream differ, and "
                    "stops at once (exit 1, no comparison) when a workload fails.")
    p.add_argument("--duration", type=positive_seconds, default=60.0, metavar="SECONDS",
                   help="how long the upstream workloads run (default 60)")
    p.add_argument("--workers", type=positive_int, default=4,
                   help="drainer SQL workers (default 4)")
    p.add_argument("--work-dir", default=None,
                   help="where data goes (default: a temporary directory, removed afterwards)")
    p.add_argument("--keep", action="store_true", help="keep the temporary directory")
    p.add_argument("--upstream-fault", type=fault_knob, action="append", default=[],
                   metavar="KNOB=COUNT",
                   help=f"arm an upstream fault knob for the next COUNT transactions ({KNOBS_HELP}"
                        "; see tidb_binlog/upstream/faults.py); shows how the demo reports a "
                        "failed workload")
    p.add_argument("--spark-diff", action="store_true",
                   help="end with the Spark consistency diff (spark_on_ray.diff, on the same "
                        "Ray) instead of the Python compare; needs Java 17 and the MariaDB "
                        "JDBC jar (scripts/setup.sh installs both)")
    p.set_defaults(func=run)


def run(args) -> int:
    # cluster/ imports ray: not at module level, the pure core (tidb_binlog/) must
    # import without ray (tests/unit/test_pure_core.py) and --help stay fast
    from cluster.demo import run_demo

    return run_demo(args.duration, workers=args.workers, work_dir=args.work_dir, keep=args.keep,
                    upstream_faults=dict(args.upstream_fault), spark_diff=args.spark_diff)
