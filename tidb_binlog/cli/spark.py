"""``tidb-binlog spark <job>``: the Spark jobs (RayDP on the Ray cluster) from the command line.

    tidb-binlog spark load --config spark.toml [--tables db db.table ...]
    tidb-binlog spark diff --config spark.toml [--tables db db.table ...] [--fix-sql-file f]
    tidb-binlog spark restore --config spark.toml [--data-dir d] [--start-tso t] [--stop-tso t]
    tidb-binlog spark snapshot-at --config spark.toml [--at-tso t] [--tables ...] [--out-dir d]
    tidb-binlog spark stats --config spark.toml [--start-tso t] [--stop-tso t] [--out-dir d]

Each job reads spark.toml (``tidb_binlog/config/spark.py``; every key in
``tidb_binlog/CONFIG.md``), joins the Ray cluster of ``--ray-address`` / ``$RAY_ADDRESS``
(under ``ray job submit`` that is the job's cluster) or starts a local one, shows a live
progress display, and ends with a summary table. Exit codes: 0 equal / done, 1 the job
found differences or failed (the error names what and where).
"""

from __future__ import annotations

import argparse
import time

from tidb_binlog.config.spark import load_spark_config

__all__ = ["register", "print_diff_summary"]

JOBS = ("load", "diff", "restore", "snapshot-at", "stats")


def register(sub) -> None:
    p = sub.add_parser("spark", help="Spark jobs on the Ray cluster (load, diff, restore, snapshot-at, stats)",
                       description=__doc__.split("\n\n")[1],
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    jobs = p.add_subparsers(dest="job", metavar="JOB")
    ld = jobs.add_parser("load", help="copy upstream tables to the downstream at one "
                         "consistent point; prints the drainer's initial-commit-ts")
    _common(ld)
    ld.add_argument("--tables", nargs="+", help='"db" or "db.table" (default: [load] tables)')
    ld.add_argument("--chunk-size", type=int, help="rows per copy unit (default 50000)")
    ld.set_defaults(func=run_load)
    d = jobs.add_parser("diff", help="compare upstream and downstream tables chunk by chunk; "
                        "write fix SQL for the differences")
    _common(d)
    d.add_argument("--tables", nargs="+", help='"db" or "db.table" (default: [diff] tables)')
    d.add_argument("--fix-sql-file", help="where the fix SQL goes (default: [diff] fix-sql-file)")
    d.add_argument("--chunk-size", type=int, help="rows per checksum chunk (default 50000)")
    d.add_argument("--checkpoint-table", help="compare at the running drainer's checkpoint "
                   "saved in this downstream schema.table, e.g. tidb_binlog.checkpoint "
                   "(default: [diff] checkpoint-table; empty = compare as they are)")
    d.set_defaults(func=run_diff)
    r = jobs.add_parser("restore", help="replay a file-sink directory into the downstream "
                        "(reparo in parallel, safe mode)")
    _common(r)
    r.add_argument("--data-dir", help="the file sink's directory (default: [restore] data-dir)")
    r.add_argument("--start-tso", type=int, help="first commit_ts to apply (default: "
                   "[restore] start-tso, 0 = from the start)")
    r.add_argument("--stop-tso", type=int, help="last commit_ts to apply (default: [restore] "
                   "stop-tso, 0 = to the end)")
    r.set_defaults(func=run_restore)
    sa = jobs.add_parser("snapshot-at", help="the tables' image as of a commit_ts, from a "
                         "file-sink directory, as Parquet")
    _common(sa)
    _lake_args(sa)
    sa.add_argument("--at-tso", type=int, help="commit_ts of the image (default: [lake] "
                    "at-tso, 0 = the end of the files)")
    sa.set_defaults(func=run_snapshot_at)
    st = jobs.add_parser("stats", help="changes per table and minute, hottest keys, from a "
                         "file-sink directory; printed and written as Parquet")
    _common(st)
    _lake_args(st)
    st.add_argument("--start-tso", type=int, help="default: [lake] start-tso (0 = the start)")
    st.add_argument("--stop-tso", type=int, help="default: [lake] stop-tso (0 = the end)")
    st.set_defaults(func=run_stats)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def _common(p) -> None:
    p.add_argument("--config", "-config", help="spark.toml")
    p.add_argument("--ray-address", help="Ray cluster to join (default $RAY_ADDRESS, else a "
                   "local Ray)")


def _lake_args(p) -> None:
    p.add_argument("--data-dir", help="the Parquet sink's lake, else a file sink's directory "
                   "(default: [lake] data-dir)")
    p.add_argument("--tables", nargs="+", help='"db" or "db.table" (default: [lake] tables)')
    p.add_argument("--out-dir", help="where the Parquet goes (default: [lake] out-dir)")


def _load(args, overrides: dict):
    return load_spark_config(args.config, {k: v for k, v in overrides.items() if v is not None})


def _console():
    """The commands' console (see tidb_binlog.cli.console)."""
    # start-up time: rich loads when a job runs, so `tidb-binlog --help` stays fast
    from tidb_binlog.cli.console import make_console

    return make_console()


class _Progress:
    """A rich progress display fed by a job's ``progress(stage, done, total)`` callback."""

    def __init__(self, console):
        # start-up time: rich loads when a job runs, so `tidb-binlog --help` stays fast
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        self.progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(),
                                 TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn(),
                                 console=console, transient=False)  # fmt: skip
        self.tasks: dict[str, int] = {}

    def __enter__(self):
        self.progress.__enter__()
        return self

    def __exit__(self, *exc):
        self.progress.__exit__(*exc)

    def __call__(self, stage: str, done: int, total: int) -> None:
        if stage != "start" and "start" in self.tasks:   # the job is under way
            self.progress.update(self.tasks["start"], completed=1)
        if stage not in self.tasks:
            self.tasks[stage] = self.progress.add_task(stage, total=max(total, 1))
        self.progress.update(self.tasks[stage], completed=done, total=max(total, 1))


def print_diff_summary(console, cfg, result, seconds: float) -> None:
    """The diff's summary table and verdict line (``spark diff`` and ``demo --spark-diff``)."""
    # start-up time: rich loads when a job runs, so `tidb-binlog --help` stays fast
    from rich.markup import escape
    from rich.table import Table  # start-up time, as above

    console.print(f"diff: {cfg.upstream.where()} vs {cfg.downstream.where()}", highlight=False)
    table = Table()
    for col in ("table", "chunks", "upstream rows", "downstream rows", "missing", "extra",
                "changed", "verdict"):
        table.add_column(col, justify="left" if col in ("table", "verdict") else "right")
    for t in result.tables:
        verdict = ("[yellow]not compared" if t.error is not None
                   else "[green]equal" if t.equal else "[red]differs")
        table.add_row(t.name, str(t.chunks), str(t.upstream_rows), str(t.downstream_rows),
                      str(t.missing), str(t.extra), str(t.changed), verdict)  # fmt: skip
    console.print(table)
    failed = result.not_compared
    for t in failed:
        console.print(f"[yellow]{escape(t.name)} not compared:[/yellow] {escape(t.error)}",
                      highlight=False)
    console.print(f"{len(result.tables)} table(s), "
                  f"{sum(not t.equal and t.error is None for t in result.tables)} differing"
                  + (f", {len(failed)} not compared" if failed else "") + "; "
                  f"fix SQL ({result.fix_statements} statements): {result.fix_sql_file}; "
                  f"{seconds:.1f} s (Spark start {result.spark_start_s:.1f} s)")
    if cfg.diff.checkpoint_table:
        console.print(f"at the drainer's checkpoint ({cfg.diff.checkpoint_table}): "
                      f"{result.recheck_rounds} re-check round(s)"
                      + (f"; {result.unsettled} chunk(s) still being written after the last "
                         "round are reported as last read" if result.unsettled else ""),
                      highlight=False)


def run_diff(args) -> int:
    # start-up time: Spark and Ray load only when the job runs (main.py's rule)
    from spark_on_ray import diff

    cfg = _load(args, {"diff.fix-sql-file": args.fix_sql_file,
                       "diff.chunk-size": args.chunk_size,
                       "diff.checkpoint-table": args.checkpoint_table})
    console = _console()
    t0 = time.monotonic()
    with _Progress(console) as progress:
        progress("start", 0, 1)
        result = diff.run(cfg, tables=tuple(args.tables or ()), progress=progress,
                          ray_address=args.ray_address)
    print_diff_summary(console, cfg, result, time.monotonic() - t0)
    return 0 if result.equal else 1


def run_load(args) -> int:
    # start-up time: rich, Spark and Ray load only when the job runs (main.py's rule)
    from rich.table import Table

    # start-up time (as above)
    from spark_on_ray import load

    cfg = _load(args, {"load.chunk-size": args.chunk_size})
    console = _console()
    t0 = time.monotonic()
    with _Progress(console) as progress:
        progress("start", 0, 1)
        result = load.run(cfg, tables=tuple(args.tables or ()), progress=progress,
                          ray_address=args.ray_address)
    console.print(f"load: {cfg.upstream.where()} -> {cfg.downstream.where()} at commit_ts "
                  f"{result.ts}", highlight=False)
    table = Table()
    table.add_column("table")
    table.add_column("rows", justify="right")
    for name, rows in sorted(result.rows.items()):
        table.add_row(name, str(rows))
    console.print(table)
    elapsed = time.monotonic() - t0
    console.print(f"{result.total_rows} rows, {len(result.rows)} table(s), {result.units} "
                  f"units on {result.tasks} tasks ({result.method}); {elapsed:.1f} s (Spark start "
                  f"{result.spark_start_s:.1f} s, copy stage {result.stage_s:.1f} s, indexes "
                  f"{result.index_s:.1f} s)")
    console.print(f"snapshot commit_ts: {result.ts}; start replication from it:")
    console.print(f"  {result.drainer_command}", highlight=False)
    return 0


def run_restore(args) -> int:
    # start-up time: rich, Spark and Ray load only when the job runs (main.py's rule)
    from rich.table import Table

    # start-up time (as above)
    from spark_on_ray import restore

    cfg = _load(args, {"restore.data-dir": args.data_dir, "restore.start-tso": args.start_tso,
                       "restore.stop-tso": args.stop_tso})
    console = _console()
    t0 = time.monotonic()
    with _Progress(console) as progress:
        progress("start", 0, 1)
        result = restore.run(cfg, progress=progress, ray_address=args.ray_address)
    rc = cfg.restore
    console.print(f"restore: {rc.data_dir} [{rc.start_tso}, {rc.stop_tso or 'end'}] -> "
                  f"{cfg.downstream.where()} (safe mode)", highlight=False)
    table = Table()
    table.add_column("table")
    table.add_column("row changes", justify="right")
    for name, rows in sorted(result.rows_per_table.items()):
        table.add_row(name, str(rows))
    console.print(table)
    console.print(f"{result.records} record(s) from {len(result.files)} file(s), "
                  f"{result.filtered} filtered out; {result.txns} transaction(s), "
                  f"{result.rows} row change(s), {result.ddls} DDL(s); {result.stretches} "
                  f"stretch(es) between DDLs, {result.spark_stages} on Spark "
                  f"({result.partitions} partitions); {time.monotonic() - t0:.1f} s (read "
                  f"{result.read_s:.1f} s, apply {result.apply_s:.1f} s, Spark start "
                  f"{result.spark_start_s:.1f} s)")
    if result.last_ts:
        console.print(f"the downstream holds every change up to commit_ts {result.last_ts}; "
                      f"continue with --start-tso {result.last_ts + 1}")
    return 0


def run_snapshot_at(args) -> int:
    # start-up time: rich, Spark and Ray load only when the job runs (main.py's rule)
    from rich.table import Table

    # start-up time (as above)
    from spark_on_ray import lake

    cfg = _load(args, {"lake.data-dir": args.data_dir, "lake.at-tso": args.at_tso,
                       "lake.out-dir": args.out_dir})
    console = _console()
    t0 = time.monotonic()
    with _Progress(console) as progress:
        progress("start", 0, 1)
        result = lake.snapshot_at(cfg, tables=tuple(args.tables or ()), progress=progress,
                                  ray_address=args.ray_address)
    console.print(f"snapshot-at: {cfg.lake.data_dir} as of commit_ts {result.at_ts} -> "
                  f"{result.out_dir}", highlight=False)
    table = Table()
    for col in ("table", "rows", "parquet"):
        table.add_column(col, justify="right" if col == "rows" else "left")
    for name, rows in sorted(result.rows.items()):
        table.add_row(name, str(rows), result.paths.get(name, "-"))
    console.print(table)
    console.print(f"{sum(result.rows.values())} rows, {len(result.rows)} table(s) from "
                  f"{result.records} {_unit(result.source)} in {len(result.files)} "
                  f"{result.source} file(s); "
                  f"{time.monotonic() - t0:.1f} s (Spark start {result.spark_start_s:.1f} s)")
    return 0


def _unit(source: str) -> str:
    """What a lake job's ``records`` counts: row changes of the Parquet lake, binlog
    records of a file sink."""
    return "row change(s)" if source == "parquet" else "record(s)"


def run_stats(args) -> int:
    # start-up time: rich, Spark and Ray load only when the job runs (main.py's rule)
    from rich.table import Table

    # start-up time (as above)
    from spark_on_ray import lake

    cfg = _load(args, {"lake.data-dir": args.data_dir, "lake.start-tso": args.start_tso,
                       "lake.stop-tso": args.stop_tso, "lake.out-dir": args.out_dir})
    console = _console()
    t0 = time.monotonic()
    with _Progress(console) as progress:
        progress("start", 0, 1)
        result = lake.stats(cfg, tables=tuple(args.tables or ()), progress=progress,
                            ray_address=args.ray_address)
    console.print(f"stats: {cfg.lake.data_dir} [{result.start_ts}, {result.stop_ts or 'end'}]"
                  f" -> {result.out_dir}", highlight=False)
    table = Table()
    for col in ("table", "inserts", "updates", "deletes", "minutes", "peak/min", "hottest keys"):
        table.add_column(col, justify="left" if col in ("table", "hottest keys") else "right")
    for t in result.tables:
        hot = ", ".join(f"{k} x{n}" for k, n in t.hot_keys)
        table.add_row(t.name, str(t.inserts), str(t.updates), str(t.deletes), str(t.minutes),
                      str(t.peak_per_minute), hot or "-")
    console.print(table)
    console.print(f"{result.records} {_unit(result.source)} in {len(result.files)} "
                  f"{result.source} file(s); per-minute "
                  f"rows in {result.out_dir}/per_minute, hottest keys in "
                  f"{result.out_dir}/hot_keys; {time.monotonic() - t0:.1f} s (Spark start "
                  f"{result.spark_start_s:.1f} s)")
    return 0
