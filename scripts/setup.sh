#!/usr/bin/env bash
# Set up everything the tests and the demo need, idempotently.
#
# Works as root on a fresh Debian machine with only python3; a second run takes seconds.
#   1. .venv/ in the repository root (python3 -m venv; installs python3-venv if needed)
#   2. pip install -e '.[test]' into it, which compiles the C extension
#      tidb_binlog/codec/_rowfast.c in place (gcc and libc6-dev via apt-get when no C
#      compiler is found, python3-dev when Debian's python3 lacks its headers); skipped
#      when .venv/.setup-stamp holds the sha256 of the build inputs already installed
#      (pyproject.toml and the C sources) and the compiled module is there
#   3. mariadb-server via apt-get when mariadbd is missing (the service is not started:
#      tests and the demo run their own throwaway servers)
#   4. Java 17 (apt openjdk-17-jre-headless) when no java is found: the Spark jobs and
#      tests/spark need it (RayDP/Spark 3.5 run on JDK 8, 11 and 17)
#   5. the MariaDB JDBC driver jar for the Spark jobs (apt libmariadb-java, when
#      /usr/share/java/mariadb-java-client.jar is missing)
#   6. promtool (apt prometheus, service not started) for the alert-rule tests of
#      cluster/monitoring (tests/unit/test_monitoring.py skips without it)
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$(pwd)
VENV="$ROOT/.venv"
STAMP="$VENV/.setup-stamp"

say() { echo "setup: $*"; }
die() { echo "setup: error: $*" >&2; exit 1; }

SUDO=()
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then SUDO=(sudo); fi
fi

need_root() {
    command -v apt-get >/dev/null 2>&1 \
        || die "apt-get not found; install $* with your package manager, then re-run"
    if [ "$(id -u)" -ne 0 ] && [ ${#SUDO[@]} -eq 0 ]; then
        die "installing $* needs root (or sudo); run this script as root"
    fi
}

apt_updated=0
apt_install() {
    need_root "$@"
    if [ "$apt_updated" -eq 0 ]; then
        say "apt-get update"
        "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
        apt_updated=1
    fi
    say "apt-get install -y $*"
    "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# --- 1. python and the virtualenv ------------------------------------------------
command -v python3 >/dev/null 2>&1 || apt_install python3
python3 - <<'EOF' || die "python >= 3.11 is required (found $(python3 --version 2>&1))"
import sys
sys.exit(0 if sys.version_info >= (3, 11) else 1)
EOF

if [ ! -x "$VENV/bin/python" ]; then
    if ! python3 -c 'import ensurepip, venv' >/dev/null 2>&1; then
        apt_install python3-venv
    fi
    say "creating $VENV"
    rm -rf "$VENV"
    python3 -m venv "$VENV"
fi

# --- 2. the project and its test extras -------------------------------------------
# What the editable install builds from: a change to any of them reinstalls.
BUILD_INPUTS=(pyproject.toml tidb_binlog/codec/_rowfast.c)
want=$(cat "${BUILD_INPUTS[@]}" | sha256sum | cut -d' ' -f1)
have=$(cat "$STAMP" 2>/dev/null || true)
built() { compgen -G "tidb_binlog/codec/_rowfast*.so" >/dev/null; }
if [ "$want" != "$have" ] || [ ! -x "$VENV/bin/tidb-binlog" ] || ! built; then
    # The C extension's build needs a C compiler and the interpreter's headers.
    if ! command -v cc >/dev/null 2>&1 && ! command -v gcc >/dev/null 2>&1; then
        apt_install gcc libc6-dev
    fi
    if ! "$VENV/bin/python" - <<'EOF'
import os, sys, sysconfig
sys.exit(0 if os.path.isfile(os.path.join(sysconfig.get_paths()["include"], "Python.h")) else 1)
EOF
    then
        base=$("$VENV/bin/python" -c 'import sys; print(sys.base_prefix)')
        if [ "$base" = /usr ]; then
            apt_install python3-dev  # Debian's python3: its headers
        else
            die "Python.h not found for the Python in $base; install its development headers"
        fi
    fi
    say "pip install -e '.[test]' (this takes a few minutes the first time)"
    "$VENV/bin/python" -m pip install -q --upgrade pip
    "$VENV/bin/python" -m pip install -q -e '.[test]'
    echo "$want" >"$STAMP"
else
    say "python packages up to date (.venv; pyproject.toml and the C sources unchanged)"
fi

# --- 3. MariaDB binaries (no service) ---------------------------------------------
find_mariadbd() {
    command -v mariadbd 2>/dev/null || { [ -x /usr/sbin/mariadbd ] && echo /usr/sbin/mariadbd; }
}
if [ -z "$(find_mariadbd || true)" ] || ! command -v mariadb-install-db >/dev/null 2>&1; then
    # policy-rc.d exit 101 tells the package scripts not to start the service.
    need_root mariadb-server
    policy=/usr/sbin/policy-rc.d
    if [ ! -e "$policy" ]; then
        trap '"${SUDO[@]}" rm -f "$policy"' EXIT
        printf '#!/bin/sh\nexit 101\n' | "${SUDO[@]}" tee "$policy" >/dev/null
        "${SUDO[@]}" chmod +x "$policy"
        apt_install mariadb-server
        "${SUDO[@]}" rm -f "$policy"
        trap - EXIT
    else
        apt_install mariadb-server
    fi
    [ -n "$(find_mariadbd || true)" ] || die "mariadb-server installed but mariadbd not found"
fi
say "mariadbd: $(find_mariadbd) ($("$(find_mariadbd)" --version | sed -E 's/.*Ver ([^ ]+).*/\1/'))"

# --- 4. Java (the Spark jobs and tests/spark) -------------------------------------
if ! command -v java >/dev/null 2>&1; then
    apt_install openjdk-17-jre-headless
    command -v java >/dev/null 2>&1 || die "openjdk-17-jre-headless installed but java not found"
fi
if command -v java >/dev/null 2>&1; then
    jv=$(java -version 2>&1 | head -n1)
    major=$(echo "$jv" | sed -E 's/.*version "(1\.)?([0-9]+).*/\2/')
    case "$major" in
        8|11|17) say "java: $jv" ;;
        *) say "note: $jv; RayDP/Spark 3.5 supports JDK 8, 11 and 17 (Spark jobs may fail)" ;;
    esac
fi
# --- 5. the JDBC driver jar of the Spark jobs (spark_on_ray) -----------------------
# Debian's libmariadb-java (MariaDB Connector/J); spark_on_ray uses jdbc:mysql:// URLs
# with permitMysqlScheme so that Spark's MySQL dialect quotes identifiers with backticks.
JDBC_JAR=/usr/share/java/mariadb-java-client.jar
if [ ! -f "$JDBC_JAR" ]; then
    apt_install libmariadb-java
    [ -f "$JDBC_JAR" ] || die "libmariadb-java installed but $JDBC_JAR not found"
fi
say "jdbc driver: $(readlink -f "$JDBC_JAR")"
# --- 6. promtool, the Prometheus rule checker (cluster/monitoring tests) -------------
# Debian's prometheus package; policy-rc.d exit 101 keeps its service from starting
# (as for MariaDB above). About 25 s; a failure only skips those tests.
if ! command -v promtool >/dev/null 2>&1 && { ! command -v apt-get >/dev/null 2>&1 \
        || { [ "$(id -u)" -ne 0 ] && [ ${#SUDO[@]} -eq 0 ]; }; }; then
    say "note: promtool not found and cannot be installed here (needs apt-get as root);"
    say "      the alert-rule tests of cluster/monitoring skip"
elif ! command -v promtool >/dev/null 2>&1; then
    policy=/usr/sbin/policy-rc.d
    if [ ! -e "$policy" ]; then
        trap '"${SUDO[@]}" rm -f "$policy"' EXIT
        printf '#!/bin/sh\nexit 101\n' | "${SUDO[@]}" tee "$policy" >/dev/null
        "${SUDO[@]}" chmod +x "$policy"
        apt_install prometheus || say "note: prometheus (promtool) not installed; the alert-rule tests skip"
        "${SUDO[@]}" rm -f "$policy"
        trap - EXIT
    else
        apt_install prometheus || say "note: prometheus (promtool) not installed; the alert-rule tests skip"
    fi
fi
command -v promtool >/dev/null 2>&1 && say "promtool: $(promtool --version 2>&1 | head -n1)"
say "done"
