#!/usr/bin/env bash
# Set up everything (scripts/setup.sh), then run the end-to-end demo:
# `tidb-binlog demo` with any arguments given here (see `tidb-binlog demo --help`).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
./scripts/setup.sh
exec .venv/bin/tidb-binlog demo "$@"
