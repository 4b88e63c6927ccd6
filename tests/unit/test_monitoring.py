"""cluster/monitoring: the Grafana dashboard is valid JSON naming only metrics we export,
and the Prometheus alert rules load in a real rule checker (promtool) and fire on
the series their unit test file feeds them (skipped, saying so, without promtool:
`apt-get install prometheus`, which scripts/setup.sh does). The same for the variants
on Ray's Prometheus export (``ray_binlog_*`` by ``source``; cluster/monitoring/ray_export.py
makes them), which must match what that script makes of the canonical files."""

from __future__ import annotations

import ast
import importlib.util
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
RAY_DASHBOARD = MONITORING / "binlog-dashboard.ray.json"
RAY_RULES = MONITORING / "binlog.ray.rules.yml"
RAY_RULES_TEST = MONITORING / "binlog.ray.rules.test.yml"

_NAME = re.compile(r"\bbinlog_(?:pump|drainer)_[a-z0-9_]+")
_RAY_NAME = re.compile(r"\bray_(binlog_(?:pump|drainer)_[a-z0-9_]+)")
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


def _ray_export_module():
    spec = importlib.util.spec_from_file_location("ray_export", MONITORING / "ray_export.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_ray_export_variants_are_made_from_the_canonical_files():
    for path, text in _ray_export_module().render().items():
        assert path.read_text() == text, (
            f"{path.name} is stale: run .venv/bin/python cluster/monitoring/ray_export.py")


def check_ray_names(exprs: list[str], where: str) -> None:
    """Every metric is a ``ray_binlog_*`` one we export (no bare ``binlog_*`` name, which
    Ray's export does not have) and nothing is grouped by ``instance`` (on Ray's export
    that is the node's metrics port, shared by every actor of the node)."""
    assert not [m for e in exprs for m in _NAME.findall(e)], f"{where}: a bare binlog_* name"
    assert not [e for e in exprs if "instance" in e], f"{where}: by instance"
    check_names([" ".join(_RAY_NAME.findall(e)) for e in exprs], where)


def test_ray_dashboard_names_only_our_metrics_as_ray_exports_them():
    doc = json.loads(RAY_DASHBOARD.read_text())
    panels = [p for p in doc["panels"] if p["type"] != "row"]
    targets = [t for p in panels for t in p["targets"]]
    assert len(panels) >= 10 and all(t["expr"] for t in targets)
    assert len({p["id"] for p in doc["panels"]}) == len(doc["panels"])
    check_ray_names([t["expr"] for t in targets], RAY_DASHBOARD.name)
    assert all("{{source}}" in t["legendFormat"] for t in targets)


def test_ray_alert_rules_are_tidb_binlogs_on_rays_names():
    doc = yaml.safe_load(RAY_RULES.read_text())
    rules = {r["alert"]: r["expr"] for g in doc["groups"] for r in g["rules"]}
    canonical = yaml.safe_load(RULES.read_text())
    assert set(rules) == {r["alert"] for g in canonical["groups"] for r in g["rules"]}
    check_ray_names(list(rules.values()), RAY_RULES.name)
    assert "by (le, source)" in " ".join(rules.values())


def test_promtool_checks_and_unit_tests_the_ray_export_rules():
    got = subprocess.run([_promtool(), "check", "rules", str(RAY_RULES)], capture_output=True,
                         text=True, timeout=60)
    assert got.returncode == 0 and "SUCCESS: 6 rules found" in got.stdout, got.stdout + got.stderr
    got = subprocess.run([_promtool(), "test", "rules", RAY_RULES_TEST.name], cwd=MONITORING,
                         capture_output=True, text=True, timeout=60)
    assert got.returncode == 0, got.stdout + got.stderr
    series = [s["series"] for t in yaml.safe_load(RAY_RULES_TEST.read_text())["tests"]
              for s in t["input_series"]]
    assert series and all(s.startswith("ray_binlog_") and 'source="' in s and "WorkerId=" in s
                          for s in series)
