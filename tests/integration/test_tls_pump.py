"""TLS between pumps and their clients on 127.0.0.1, with certificates made at test time:
the pump client (what the upstream writes through), the drainer's pull client
(GrpcPumpSource), ``cert-allowed-cn``, and the errors that say what to set."""

from __future__ import annotations

import json
import logging
import ssl
import time
import urllib.error
import urllib.request

import pytest

from tidb_binlog import binlog as bl
from tidb_binlog.config import load_pump_config
from tidb_binlog.drainer.source.pump_source import GrpcPumpSource
from tidb_binlog.errors import UnavailableError
from tidb_binlog.pump.server import open_pump
from tidb_binlog.pump_client import PumpClient
from tidb_binlog.pump_client.transport import PumpTLS
from tidb_binlog.testing.certs import TLSFiles, make_pki
from tidb_binlog.testing.pump_process import PumpProcess

pytest.importorskip("cryptography")

CLUSTER_ID = 9


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"), clients=("intruder",))


@pytest.fixture
def start_pump(tmp_path):
    started = []

    def start(security: TLSFiles | None):
        keys = {"data-dir": str(tmp_path / f"pump{len(started)}"), "addr": "127.0.0.1:0",
                "node-id": f"pump-{len(started)}", "cluster-id": CLUSTER_ID,
                "gen-binlog-interval": 3600, "storage.stop-write-at-available-space": 1 << 20,
                **(security.keys() if security is not None else {})}
        proc = open_pump(load_pump_config(None, keys), status_addr="127.0.0.1:0")
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.stop()


def client(addr: str, tls: PumpTLS | None) -> PumpClient:
    # short budgets: a refused write fails in seconds instead of the default minute, yet
    # long enough for a TLS handshake on a loaded machine (the refusal is what is asserted,
    # not a deadline)
    return PumpClient(None, cluster_id=CLUSTER_ID, pumps=[addr], tls=tls, rpc_timeout_s=5.0,
                      write_timeout_s=8.0, probe_interval_s=3600)


def http_get(addr: str, tls: TLSFiles, path: str) -> tuple[int, dict]:
    """``GET https://addr/path`` presenting ``tls``'s certificate: (status, JSON body)."""
    ctx = ssl.create_default_context(cafile=tls.ssl_ca)
    ctx.load_cert_chain(tls.ssl_cert, tls.ssl_key)
    try:
        with urllib.request.urlopen(f"https://{addr}{path}", timeout=10, context=ctx) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def write_txn(c: PumpClient, start_ts: int) -> str:
    value = bl.new_prewrite_value(1).SerializeToString()
    node = c.write_binlog(bl.prewrite(start_ts, value, prewrite_key=b"k"))
    assert c.write_binlog(bl.commit(start_ts, start_ts + 1)) == node
    return node


def committed(proc, expect: list[int] | None = None) -> list[int]:
    """The start_ts of the pump's committed binlogs; with ``expect``, waited for up to
    30 s (the storage's sorter publishes a commit shortly after the write returned)."""
    deadline = time.monotonic() + (30 if expect else 0)
    while True:
        seen = [bl.decode(p).start_ts for _, p in proc.node.storage.pull_commit_binlogs(0)]
        if seen == expect or time.monotonic() >= deadline:
            return seen
        time.sleep(0.05)


def test_a_tls_client_writes_to_a_mutual_tls_pump(start_pump, pki):
    proc = start_pump(pki.server)
    with client(proc.addr, PumpTLS.from_security(pki.client)) as c:
        assert write_txn(c, 100) == proc.addr
        c.flush()
    assert committed(proc, [100]) == [100]


def test_a_plaintext_client_is_refused_with_what_to_set(start_pump, pki):
    proc = start_pump(pki.server)
    with client(proc.addr, None) as c, pytest.raises(UnavailableError) as info:
        write_txn(c, 200)
    text = str(info.value)
    assert proc.addr in text and "set [security] ssl-ca" in text
    assert committed(proc) == []


def test_a_client_without_a_certificate_is_refused_with_what_to_set(start_pump, pki):
    proc = start_pump(pki.server)
    with client(proc.addr, PumpTLS.from_security(pki.ca_only)) as c, \
            pytest.raises(UnavailableError) as info:
        write_txn(c, 300)
    text = str(info.value)
    assert proc.addr in text and "set [security] ssl-cert and ssl-key" in text
    assert committed(proc) == []


def test_a_tls_client_of_a_plaintext_pump_says_so(start_pump, pki):
    proc = start_pump(None)
    with client(proc.addr, PumpTLS.from_security(pki.client)) as c, \
            pytest.raises(UnavailableError) as info:
        write_txn(c, 400)
    assert "TLS handshake with" in str(info.value) and proc.addr in str(info.value)


def test_cert_allowed_cn_refuses_other_names(start_pump, pki):
    allowed = TLSFiles(pki.server.ssl_ca, pki.server.ssl_cert, pki.server.ssl_key,
                       cert_allowed_cn=("client",))
    proc = start_pump(allowed)
    with client(proc.addr, PumpTLS.from_security(pki.client)) as c:
        write_txn(c, 500)
        c.flush()
    with client(proc.addr, PumpTLS.from_security(pki.clients["intruder"])) as c, \
            pytest.raises(UnavailableError) as info:
        write_txn(c, 600)
    assert "intruder is not in this server's [security] cert-allowed-cn" in str(info.value)
    assert committed(proc, [500]) == [500]
    # the HTTP status API enforces the same list (per request: 403 naming the name)
    assert http_get(proc.status_addr, pki.client, "/status")[0] == 200
    code, body = http_get(proc.status_addr, pki.clients["intruder"], "/status")
    assert code == 403 and "intruder is not in this server's [security] cert-allowed-cn" \
        in body["message"]


def test_the_drainer_pulls_from_a_tls_pump(start_pump, pki, caplog):
    proc = start_pump(pki.server)
    with client(proc.addr, PumpTLS.from_security(pki.client)) as c:
        write_txn(c, 700)
        c.flush()
    source = GrpcPumpSource(proc.addr, CLUSTER_ID, pki.client, node_id="pump-0")
    try:
        items, _ = source.fetch(0, timeout_s=30)
        assert [ts for ts, _ in items][:1] == [701]
    finally:
        source.close()
    # without [security] the pull is refused, and the log says what to set
    plain = GrpcPumpSource(proc.addr, CLUSTER_ID, None, node_id="pump-0",
                           reconnect_interval_s=0.05)
    with caplog.at_level(logging.WARNING, logger="tidb_binlog"):
        try:
            items, _ = plain.fetch(0, timeout_s=2)
            assert items == []
        finally:
            plain.close()
    assert any("set [security] ssl-ca" in r.getMessage() for r in caplog.records)


def test_a_standalone_tls_pump_process_starts_and_takes_tls_writes(pki, tmp_path):
    """PumpProcess probes a TLS pump over HTTPS with the pump's own files (it refused TLS
    pumps before); a mutual-TLS client writes to the subprocess, and SIGTERM stops it."""
    with PumpProcess({"cluster-id": CLUSTER_ID, "gen-binlog-interval": 3600,
                      **pki.server.keys()}, tmp_path / "proc") as proc:
        proc.start()
        with client(proc.addr, PumpTLS.from_security(pki.client)) as c:
            assert write_txn(c, 800) == proc.addr
            c.flush()
        assert http_get(proc.status_addr, pki.client, "/status")[0] == 200
        assert proc.terminate() == 0
