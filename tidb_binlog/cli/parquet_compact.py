"""``tidb-binlog parquet-compact``: merge a Parquet lake's small change files.

The Parquet sink writes one file per table and date partition at every flush, so a lake
that runs for long holds many small files. This merges consecutive small files of one
table, date and schema version into files of about ``--target-mb``, and replaces the
manifest atomically: readers (the Spark lake jobs, ``committed_files``) see the old file
list or the new one, the same rows either way; the manifest's commit_ts, schemas and
DDLs do not change. Replaced files stay on disk, listed as retired, for ``--grace-s``
(readers still at an older manifest), and a later run deletes them.

Run it while no drainer writes the lake: the sink holds the lake's lock and the
command refuses with the holder's name (stop the drainer, compact, start it again;
nothing is replayed). See tidb_binlog/drainer/sinks/parquet/README.md "Compaction".
"""

from __future__ import annotations

import argparse

# compact.TARGET_BYTES and compact.GRACE_S (not imported here: pyarrow would slow every
# `tidb-binlog --help`); tests/unit/test_parquet_compact.py checks they agree
TARGET_BYTES = 128 << 20
GRACE_S = 600.0


def register(sub) -> None:
    p = sub.add_parser("parquet-compact", help="merge a Parquet lake's small files "
                       "(db-type parquet), with the drainer stopped",
                       description=__doc__.split("\n\n", 1)[1],
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dir", required=True, help="the lake: the Parquet sink's [syncer.to] "
                   "dir (default there: the drainer's data-dir)")
    p.add_argument("--target-mb", type=float, default=TARGET_BYTES / (1 << 20),
                   help=f"merged files grow up to about this many MiB; files this large or "
                   f"larger stay as they are (default {TARGET_BYTES >> 20})")
    p.add_argument("--grace-s", type=float, default=GRACE_S,
                   help=f"keep replaced files this many seconds for readers of an older "
                   f"manifest; a later run deletes them (default {GRACE_S:.0f})")
    p.add_argument("--dry-run", action="store_true", help="report what would be merged")
    p.set_defaults(func=run)


def run(args) -> int:
    # Deferred (start-up time): `tidb-binlog --help` should not load pyarrow.
    from tidb_binlog.drainer.sinks.parquet.compact import compact

    if args.target_mb <= 0 or args.grace_s < 0:
        raise SystemExit("tidb-binlog parquet-compact: --target-mb must be > 0 and --grace-s "
                         ">= 0")
    result = compact(args.dir, target_bytes=int(args.target_mb * (1 << 20)),
                     grace_s=args.grace_s, dry_run=args.dry_run)
    verb = "would merge" if args.dry_run else "merged"
    print(f"{verb} {result.merged_files} files into {result.new_files} ({result.rows} rows); "
          f"retired files deleted {result.deleted_retired}, kept {result.kept_retired}")
    return 0
