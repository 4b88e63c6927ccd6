"""``tidb-binlog demo --spark-diff``: the demo ends with the Spark diff of its databases
instead of the Python compare (on the test session's Ray and Spark), and a machine without
Java is told what to install before anything starts."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import time

from rich.console import Console

from cluster.demo import run_demo


def test_the_demo_ends_with_a_spark_diff(spark_handle, tmp_path):
    out = io.StringIO()
    console = Console(file=out, width=160, soft_wrap=True)
    code = run_demo(5, work_dir=str(tmp_path / "demo"), console=console, spark_diff=True,
                    spark_handle=spark_handle)
    text = out.getvalue()
    assert code == 0, text
    assert "comparing with the Spark diff" in text
    assert "diff: 0" in text
    assert "0 differing" in text, text
    # the demo's tables were diffed (the all-types and keyless ones among them), not nothing
    for table in ("demo.all_types", "demo.nopk"):
        assert table in text, text
    assert "compared" not in text  # the Python compare did not run as well
    # the session's Ray and Spark still work: the demo leaves a Ray it did not start
    assert spark_handle.spark.sparkContext.parallelize([1, 2]).count() == 2


def test_without_java_the_demo_names_what_to_install(tmp_path):
    env = {**os.environ, "JAVA_HOME": str(tmp_path / "no-jdk")}
    started = time.monotonic()
    got = subprocess.run([sys.executable, "-m", "tidb_binlog.cli.main", "demo", "--spark-diff",
                          "--duration", "5", "--work-dir", str(tmp_path / "demo")],
                         capture_output=True, text=True, timeout=60, env=env)
    assert got.returncode == 1, got
    assert "SparkSetupError: Java not found" in got.stderr, got.stderr
    assert "scripts/setup.sh" in got.stderr and "openjdk-17" in got.stderr
    assert "working in" not in got.stdout  # refused before Ray or MariaDB started
    assert time.monotonic() - started < 50  # generous: nothing started
