"""``[security] cert-allowed-cn`` on the drainer node's servers (Cistern gRPC and the HTTP
status API), checked per call as on the pump: a TLS client whose certificate's common
name is listed gets through, another is refused naming it. Certificates are made at
test time; no registry, no pipeline."""

from __future__ import annotations

import grpc
import pytest
from test_tls_pump import http_get

from tidb_binlog.drainer.service.http_status import DrainerStatus
from tidb_binlog.drainer.service.node import DrainerNode, ServiceSettings
from tidb_binlog.errors import UnavailableError
from tidb_binlog.node import PAUSED
from tidb_binlog.pump.transport import notify_drainer
from tidb_binlog.testing.certs import TLSFiles, make_pki

pytest.importorskip("cryptography")

REFUSED = "intruder is not in this server's [security] cert-allowed-cn (client)"


def test_cert_allowed_cn_on_cistern_and_the_http_status_api(tmp_path):
    pki = make_pki(tmp_path / "pki", clients=("intruder",))
    security = TLSFiles(pki.server.ssl_ca, pki.server.ssl_cert, pki.server.ssl_key,
                        cert_allowed_cn=("client",))
    settings = ServiceSettings(node_id="drainer-tls", addr="127.0.0.1:0",
                               advertise_addr="127.0.0.1:0", status_addr="127.0.0.1:0",
                               security=security)
    node = DrainerNode(settings, None, checkpoint_ts=lambda: 0)
    notified = []
    node.serve(on_notify=lambda: notified.append(1),
               status_provider=lambda: DrainerStatus(checkpoint_ts=7, last_sync_s=0.0),
               metrics_provider=None, on_action=lambda action: None)
    try:
        notify_drainer(node.cistern.addr, pki.client)
        assert notified == [1]
        with pytest.raises(UnavailableError, match="PERMISSION_DENIED") as info:
            notify_drainer(node.cistern.addr, pki.clients["intruder"])
        assert info.value.__cause__.code() == grpc.StatusCode.PERMISSION_DENIED
        assert REFUSED in str(info.value)
        assert notified == [1]  # refused before the pump list was refreshed

        code, body = http_get(node.http.addr, pki.client, "/status")
        assert code == 200 and body["LastTS"] == 7
        code, body = http_get(node.http.addr, pki.clients["intruder"], "/commit_ts")
        assert code == 403 and REFUSED in body["message"]
    finally:
        node.close(PAUSED)
