"""grpc_server.new_event_loop: uvloop when importable, asyncio on request, clear errors."""

from __future__ import annotations

import importlib.util

import pytest

from tidb_binlog.errors import ConfigError
from tidb_binlog.pump.grpc_server import EVENT_LOOP_ENV, new_event_loop

HAS_UVLOOP = importlib.util.find_spec("uvloop") is not None


def _kind(loop) -> str:
    try:
        return "uvloop" if type(loop).__module__.startswith("uvloop") else "asyncio"
    finally:
        loop.close()


def test_asyncio_on_request(monkeypatch):
    monkeypatch.setenv(EVENT_LOOP_ENV, "asyncio")
    assert _kind(new_event_loop()) == "asyncio"
    assert _kind(new_event_loop("asyncio")) == "asyncio"


def test_auto_takes_uvloop_when_installed(monkeypatch):
    monkeypatch.delenv(EVENT_LOOP_ENV, raising=False)
    assert _kind(new_event_loop()) == ("uvloop" if HAS_UVLOOP else "asyncio")


def test_uvloop_required_but_missing_is_a_config_error(monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "uvloop", None)   # import fails
    with pytest.raises(ConfigError, match="uvloop is not installed"):
        new_event_loop("uvloop")
    assert _kind(new_event_loop("auto")) == "asyncio"


def test_unknown_kind_names_the_variable(monkeypatch):
    monkeypatch.setenv(EVENT_LOOP_ENV, "trio")
    with pytest.raises(ConfigError, match=f"{EVENT_LOOP_ENV}='trio'"):
        new_event_loop()
