"""The pump's and drainer's HTTP status APIs (which can pause, close and force GC) listen
on 127.0.0.1 unless configured otherwise: the default addresses are loopback and HTTP
takes the gRPC address's host."""

from __future__ import annotations

from tidb_binlog.config import load_drainer_config, load_pump_config
from tidb_binlog.pump.http_status import derive_status_addr


def test_default_http_status_addresses_are_loopback():
    pump, drainer = load_pump_config(None), load_drainer_config(None)
    assert derive_status_addr(pump.addr) == "127.0.0.1:8251"
    assert derive_status_addr(drainer.addr) == "127.0.0.1:8250"


def test_configured_status_addr_wins_over_the_grpc_host():
    assert derive_status_addr("0.0.0.0:8250", "127.0.0.1:9000") == "127.0.0.1:9000"
    assert derive_status_addr("10.0.0.5:8250") == "10.0.0.5:8251"
