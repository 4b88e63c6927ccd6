#!/usr/bin/env bash
# Set up everything (scripts/setup.sh), lint, then run the whole test suite:
# unit, integration (throwaway MariaDB servers), ray (one local Ray) and spark.
# Extra arguments go to pytest, e.g. scripts/test.sh -x -k pump.
# The exit code is pytest's (or ruff's when lint fails).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
./scripts/setup.sh

lint_paths=()
for p in tidb_binlog actors cluster spark_on_ray bench tests; do
    [ -e "$p" ] && lint_paths+=("$p")
done
echo "test: ruff check ${lint_paths[*]}"
# The generated stubs (*_pb2*.pyi) are grpcio-tools output, like the excluded *_pb2*.py.
.venv/bin/ruff check --extend-exclude 'tidb_binlog/proto/*_pb2*.pyi' "${lint_paths[@]}"

# --durations: the slowest tests at the end of every run, so the suite's time budget
# (25 minutes on 2 cores) can be watched from CI's output.
echo "test: pytest -m '' --durations=25 tests $*"
exec .venv/bin/pytest -m "" --durations=25 tests "$@"
