"""The pure core never imports ray: neither directly nor through a dependency."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import tidb_binlog

PACKAGE_DIR = Path(tidb_binlog.__file__).resolve().parent

# Runs in a fresh interpreter: a meta-path finder refuses `ray` and `ray.*`, then every
# module of the package is imported.  Prints a JSON list of [module, error] failures.
_IMPORT_ALL = r"""
import importlib, json, pkgutil, sys, traceback

class NoRay:
    def find_spec(self, name, path=None, target=None):
        if name == "ray" or name.startswith("ray."):
            raise ImportError(f"ray is unimportable in the pure core (asked for {name!r})")
        return None

sys.meta_path.insert(0, NoRay())
failures = []
import tidb_binlog
names = ["tidb_binlog"] + [m.name for m in pkgutil.walk_packages(
    tidb_binlog.__path__, "tidb_binlog.", onerror=lambda name: failures.append([name, "walk"]))]
for name in names:
    try:
        importlib.import_module(name)
    except BaseException:
        failures.append([name, traceback.format_exc(limit=-3)])
loaded = [n for n in sys.modules if n == "ray" or n.startswith("ray.")]
print(json.dumps({"modules": names, "failures": failures, "ray_loaded": loaded}))
"""

_RAY_IMPORT = re.compile(r"^\s*(import\s+ray\b|from\s+ray(\.|\s))", re.M)


def test_every_module_imports_without_ray():
    proc = subprocess.run([sys.executable, "-c", _IMPORT_ALL], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "tidb_binlog.tso" in report["modules"]  # the walk really walked
    assert "tidb_binlog.testing.mariadb" in report["modules"]
    messages = [f"{name} failed to import without ray:\n{err}"
                for name, err in report["failures"]]
    assert not messages, "\n\n".join(messages)
    assert report["ray_loaded"] == []


def test_no_source_file_imports_ray():
    offenders = []
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        for match in _RAY_IMPORT.finditer(path.read_text()):
            line = path.read_text().count("\n", 0, match.start()) + 1
            offenders.append(f"{path.relative_to(PACKAGE_DIR.parent)}:{line}: "
                             f"{match.group(0).strip()}")
    assert not offenders, "the pure core must not import ray:\n" + "\n".join(offenders)


def test_the_ray_pattern_catches_what_it_should():
    for bad in ("import ray", "  import ray.util", "from ray import remote", "from ray.util import x"):
        assert _RAY_IMPORT.search(bad), bad
    for good in ("import rayon", "from raydp import x", "# mention of ray", "array = 1"):
        assert not _RAY_IMPORT.search(good), good
