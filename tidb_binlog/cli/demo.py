"""``tidb-binlog demo``: the whole path end to end on this machine, then a full comparison."""

from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser(
        "demo",
        help="run upstream → pumps → drainer → downstream on local Ray and compare",
        description="Start a local Ray, the registry/TSO, two pumps, throwaway upstream and "
                    "downstream MariaDB servers and a drainer; run the upstream workloads "
                    "(mixed DML, DDL, all types, no-PK tables) while showing progress; then "
                    "compare every table. Exits 1 when upstream and downstream differ.")
    p.add_argument("--duration", type=float, default=60.0, metavar="SECONDS",
                   help="how long the upstream workloads run (default 60)")
    p.add_argument("--workers", type=int, default=4, help="drainer SQL workers (default 4)")
    p.add_argument("--work-dir", default=None,
                   help="where data goes (default: a temporary directory, removed afterwards)")
    p.add_argument("--keep", action="store_true", help="keep the temporary directory")
    p.set_defaults(func=run)


def run(args) -> int:
    from cluster.demo import run_demo

    return run_demo(args.duration, workers=args.workers, work_dir=args.work_dir, keep=args.keep)
