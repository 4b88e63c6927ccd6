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

# Two pytest-xdist workers (TEST_WORKERS, 0 = one process): most tests wait on servers,
# Ray actors and checkpoints, so two of them share 2 cores well. --dist loadfile keeps
# a module's tests on one worker (its shared stack) and all Spark tests on one (one Spark
# session), longest first (tests/conftest.py's scheduler); each worker has its own Ray
# under /tmp/ray-<worker>. --durations: the slowest tests at the end of every
# run, so the suite's time budget (15 minutes on 2 cores) can be watched from CI's output.
workers="${TEST_WORKERS:-2}"
echo "test: pytest -m '' -n $workers --dist loadfile --durations=25 tests $*"
exec .venv/bin/pytest -m "" -n "$workers" --dist loadfile --durations=25 tests "$@"
