"""tidb_binlog/logs.py: node id on every line, commit_ts as a field, JSON lines that
parse, and no password in any line."""

from __future__ import annotations

import io
import json
import logging

import pytest

from tidb_binlog.errors import ConfigError
from tidb_binlog.logs import redact, setup_logging, stamp_node, txn


@pytest.fixture
def restore_root():
    """A root logger without pytest's handlers (setup_logging leaves a root logger
    someone else configured alone; pytest adds its own when the test body starts, so
    the test calls the returned function first); the handlers restored after."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level

    def clear():
        for h in list(root.handlers):
            root.removeHandler(h)

    yield clear
    for h in list(root.handlers):
        root.removeHandler(h)
    for h in handlers:
        root.addHandler(h)
    root.setLevel(level)


def test_text_lines_carry_the_node_id_and_commit_ts(restore_root):
    restore_root()
    out = io.StringIO()
    setup_logging("pump-3", fmt="text", level="info", stream=out)
    logging.getLogger("tidb_binlog.pump.x").info("commit of %d resolved", 7, extra=txn(7))
    logging.getLogger("other").warning("no transaction here")
    first, second = out.getvalue().splitlines()
    assert "[INFO] [tidb_binlog.pump.x] [node=pump-3] commit of 7 resolved commit_ts=7" in first
    assert "[node=pump-3] no transaction here" in second and "commit_ts" not in second


def test_json_lines_parse(restore_root):
    restore_root()
    out = io.StringIO()
    setup_logging(lambda: "orders-merger", fmt="json", level="debug", stream=out)
    log = logging.getLogger("tidb_binlog.drainer")
    log.debug("checkpoint %d saved", 42, extra=txn(42))
    try:
        raise ValueError("boom")
    except ValueError:
        log.exception("apply failed")
    docs = [json.loads(line) for line in out.getvalue().splitlines()]
    assert docs[0]["node_id"] == "orders-merger" and docs[0]["commit_ts"] == 42
    assert docs[0]["message"] == "checkpoint 42 saved" and docs[0]["level"] == "DEBUG"
    assert docs[1]["level"] == "ERROR" and "ValueError: boom" in docs[1]["error"]


def test_a_node_id_learnt_later_is_stamped(restore_root):
    restore_root()
    out = io.StringIO()
    setup_logging("", fmt="text", level="info", stream=out)
    node = {"id": ""}
    stamp_node(lambda: node["id"])
    logging.getLogger("x").info("before")
    node["id"] = "host:8250"
    logging.getLogger("x").info("after")
    before, after = out.getvalue().splitlines()
    assert "[node=" not in before and "[x] before" in before  # the plain format
    assert "[node=host:8250] after" in after


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_no_password_gets_through(restore_root, fmt):
    restore_root()
    out = io.StringIO()
    setup_logging("d", fmt=fmt, level="info", stream=out)
    log = logging.getLogger("x")
    log.info("dsn mysql://root:hunter2@10.0.0.5:3306/db")
    log.info("to %s", {"host": "h", "password": "hunter2"})
    log.info("password=hunter2 user=root; passwd: 'hunter2'")
    try:
        raise RuntimeError("connect failed with PASSWORD=hunter2")
    except RuntimeError:
        log.exception("oops")
    assert "hunter2" not in out.getvalue()
    assert out.getvalue().count("******") >= 5  # the traceback quotes the source too


def test_redact_leaves_other_text_alone():
    assert redact("user=root host=h port=3306") == "user=root host=h port=3306"
    assert redact("encrypted_password = abc") == "encrypted_password = abc"  # not a word
    assert redact("password: s3cr3t,") == "password: ******,"


def test_a_bad_format_is_refused(restore_root):
    restore_root()
    with pytest.raises(ConfigError, match="log format 'xml' is not one of text, json") as info:
        setup_logging("x", fmt="xml")
    assert info.value.key == "TIDB_BINLOG_LOG_FORMAT"


def test_a_root_logger_configured_by_someone_else_is_left_alone():
    root = logging.getLogger()
    theirs = logging.StreamHandler(io.StringIO())
    root.addHandler(theirs)
    try:
        assert setup_logging("x", fmt="json") is None
        assert theirs in root.handlers and theirs.formatter is None
    finally:
        root.removeHandler(theirs)
