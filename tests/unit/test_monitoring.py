"""cluster/monitoring: the Grafana dashboard is valid JSON naming only metrics we export,
and the Prometheus alert rules load in a real rule checker (promtool) and fire on
the series their unit test file feeds them (skipped, saying so, without promtool:
`apt-get install prometheus`, which scripts/setup.sh does)."""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
MONITORING = ROOT / "cluster" / "monitoring"
DASHBOARD = MONITORING / "binlog-dashboard.json"
RULES = MONITORING / "binlog.rules.yml"
RULES_TEST = MONITORING / "binlog.rules.test.yml"

_NAME = re.compile(r"\bbinlog_(?:pump|drainer)_[a-z0-9_]+")
# What Prometheus appends to a family's name in its series.
_SUFFIXES = ("_bucket", "_count", "_sum", "_total", "_created")


def exported_metric_names() -> set[str]:
    """Every binlog_pump_* / binlog_drainer_* family the code registers, read from the
    string constants of tidb_binlog/ (a constant ending in "_" is a prefix, joined with
    the other constants of its file, as ``p + "write_binlog_duration_time"``)."""
    names: set[str] = set()
    for path in (ROOT / "tidb_binlog").rglob("*.py"):
        strings = [n.value for n in ast.walk(ast.parse(path.read_text()))
                   if isinstance(n, ast.Constant) and isinstance(n.value, str)]
        for s in strings:
            if re.fullmatch(r"binlog_(pump|drainer)_[a-z0-9_]*", s):
                if s.endswith("_"):
                    names.update(s + t for t in strings if re.fullmatch(r"[a-z][a-z0-9_]*", t))
                else:
                    names.add(s)
    return names


def family(series_name: str) -> str:
    for suffix in _SUFFIXES:
        if series_name.endswith(suffix):
            return series_name[: -len(suffix)]
    return series_name


def check_names(exprs: list[str], where: str) -> None:
    exported = exported_metric_names()
    assert {"binlog_pump_rpc_duration_seconds", "binlog_drainer_checkpoint_tso"} <= exported
    used = {m for e in exprs for m in _NAME.findall(e)}
    assert used, f"{where} names no metric"
    unknown = sorted(m for m in used if m not in exported and family(m) not in exported)
    assert not unknown, f"{where} uses metrics nobody exports: {unknown}"


def test_dashboard_is_json_and_names_only_our_metrics():
    doc = json.loads(DASHBOARD.read_text())
    panels = [p for p in doc["panels"] if p["type"] != "row"]
    exprs = [t["expr"] for p in panels for t in p["targets"]]
    assert len(panels) >= 10 and all(exprs)
    assert len({p["id"] for p in doc["panels"]}) == len(doc["panels"])   # Grafana needs unique ids
    check_names(exprs, DASHBOARD.name)


def test_alert_rules_have_tidb_binlogs_alerts_on_our_metrics():
    doc = yaml.safe_load(RULES.read_text())
    rules = {r["alert"]: r["expr"] for g in doc["groups"] for r in g["rules"]}
    assert len(rules) == 6
    check_names(list(rules.values()), RULES.name)
    joined = " ".join(rules.values())
    for needle in ('method="WriteBinlog"', 'type="available"', "> 3600", "changes(",
                   "> 10", "20 * 1024 * 1024 * 1024"):
        assert needle in joined, needle


def _promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.skip("promtool not installed (Debian: apt-get install prometheus; "
                    "scripts/setup.sh installs it)")
    return path


def test_promtool_checks_the_rules():
    got = subprocess.run([_promtool(), "check", "rules", str(RULES)], capture_output=True,
                         text=True, timeout=60)
    assert got.returncode == 0, got.stdout + got.stderr
    assert "SUCCESS: 6 rules found" in got.stdout


def test_promtool_unit_test_every_alert_fires_and_healthy_series_stay_quiet():
    got = subprocess.run([_promtool(), "test", "rules", RULES_TEST.name], cwd=MONITORING,
                         capture_output=True, text=True, timeout=60)
    assert got.returncode == 0, got.stdout + got.stderr
