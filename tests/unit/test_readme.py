"""The README's codec example runs as written (a README that lies is a defect). Its
Python API example needs MariaDB and Ray: tests/ray/test_task_api.py runs that one."""

from __future__ import annotations

import re
from pathlib import Path

from tidb_binlog.cli.main import build_parser

README = Path(__file__).resolve().parents[2] / "README.md"


def _python_block_after(heading: str) -> str:
    text = README.read_text()
    start = text.index("```python", text.index(heading)) + len("```python")
    return text[start:text.index("```", start)]


def test_codec_example_runs():
    exec(compile(_python_block_after("## The TiDB codec"), "README.md", "exec"), {})


def test_top_commands_are_the_scripts_ci_runs():
    text = README.read_text()
    first_block = text[text.index("```bash"):text.index("```", text.index("```bash") + 7)]
    assert "./scripts/demo.sh" in first_block and "./scripts/test.sh" in first_block
    ci = (README.parent / ".ci" / "run").read_text()
    assert "./scripts/test.sh" in ci


def test_the_commands_table_lists_every_command_the_cli_has():
    text = README.read_text()
    table = text[text.index("### Commands"):text.index("### Python API")]
    listed = re.findall(r"^\| `([a-z-]+)` \|", table, re.M)
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")  # argparse's own
    assert listed == list(sub.choices), (listed, list(sub.choices))
