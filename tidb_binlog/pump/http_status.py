"""The pump's HTTP status API (TiDB's ``docs/binlog_http_api.md``), stdlib only.

TiDB multiplexes HTTP and gRPC on one port with cmux; grpcio cannot share a
socket, so the HTTP API listens on a second port: ``status-addr`` when set,
else the gRPC port + 1 on the same host (``8250`` → ``8251``; port 0 → any).

=============================== ================================================================
``GET /status``                  ``{"status": {nodeID: status}, "CommitTS": <fresh TSO>,
                                 "Checkpoint": {"gcTS", "maxCommitTS"}, "ErrMsg": ""}`` for every
                                 pump in the registry (only this one when there is none)
``GET /drainers``                JSON list of drainer records
``PUT /state/{nodeID}/{action}`` ``pause`` or ``close``, only this node, only while online:
                                 ``{"message":"apply action X success!","code":200}`` then
                                 acts asynchronously; refused with ``code`` 400 and the reason
``GET /debug/binlog/{ts}``       text dump of the binlog stored under ``ts`` (start_ts of a
                                 Prewrite, commit_ts otherwise) and its decoded PrewriteValue
``POST /debug/gc/trigger``       GC now (``?force=true`` passes drainer checkpoints)
``GET /metrics``                 Prometheus text format
=============================== ================================================================

Status records use TiDB's JSON names (``nodeId``, ``host``, ``state``,
``isAlive``, ``score``, ``label``, ``maxCommitTS``, ``updateTS``).
"""

from __future__ import annotations

import json
import logging
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from google.protobuf import text_format

from tidb_binlog import binlog as bl
from tidb_binlog.errors import BinlogError
from tidb_binlog.pump.metrics import CONTENT_TYPE_LATEST

__all__ = ["StatusServer", "derive_status_addr", "status_document"]

log = logging.getLogger(__name__)


def derive_status_addr(grpc_addr: str, status_addr: str = "") -> str:
    """``status_addr`` if set, else the gRPC host with port + 1 (0 stays 0)."""
    if status_addr:
        return status_addr
    host, _, port = grpc_addr.rpartition(":")
    port_n = int(port)
    return f"{host}:{port_n + 1 if port_n else 0}"


def _record(status) -> dict:
    return json.loads(status.to_json())


def status_document(node) -> dict:
    return {
        "status": {s.node_id: _record(s) for s in node.pumps()},
        "CommitTS": node.get_ts(),
        "Checkpoint": {"gcTS": node.storage.gc_ts, "maxCommitTS": node.storage.max_commit_ts},
        "ErrMsg": "",
    }


def _dump_binlog(b) -> str:
    lines = [f"binlog: {text_format.MessageToString(b, as_one_line=True)}"]
    if b.HasField("prewrite_value") and b.prewrite_value:
        try:
            pv = bl.decode_prewrite_value(b.prewrite_value)
            lines.append("prewrite value:")
            lines.append(text_format.MessageToString(pv))
        except BinlogError as exc:
            lines.append(f"prewrite value: cannot decode: {exc}")
    return "\n".join(lines) + "\n"


class _Handler(BaseHTTPRequestHandler):
    node = None  # set on a subclass per server
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        log.debug("http %s " + fmt, self.address_string(), *args)

    def _send(self, code: int, body: bytes, content_type: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _json(self, code: int, doc) -> None:
        self._send(code, json.dumps(doc).encode(), "application/json")

    def _text(self, code: int, text: str) -> None:
        self._send(code, text.encode(), "text/plain; charset=utf-8")

    def _route(self, method: str) -> None:
        url = urlsplit(self.path)
        parts = [p for p in url.path.split("/") if p]
        node = self.node
        try:
            if method == "GET" and parts == ["status"]:
                return self._json(200, status_document(node))
            if method == "GET" and parts == ["drainers"]:
                return self._json(200, [_record(d) for d in node.drainers()])
            if method == "PUT" and len(parts) == 3 and parts[0] == "state":
                try:
                    message = node.apply_action(parts[1], parts[2])
                except BinlogError as exc:
                    return self._json(400, {"message": str(exc), "code": 400})
                return self._json(200, {"message": message, "code": 200})
            if method == "GET" and len(parts) == 3 and parts[:2] == ["debug", "binlog"]:
                try:
                    ts = int(parts[2])
                except ValueError:
                    return self._text(400, f"ts {parts[2]!r} is not an integer TSO\n")
                b = node.storage.get_binlog(ts)
                if b is None:
                    return self._text(404, f"no binlog stored under ts {ts}\n")
                return self._text(200, _dump_binlog(b))
            if method == "POST" and parts == ["debug", "gc", "trigger"]:
                force = parse_qs(url.query).get("force", ["false"])[0].lower() in ("1", "true")
                d = node.gc(force=force)
                detail = f"gc_ts={d.gc_ts}" if d.gc_ts is not None else "nothing collected"
                return self._text(200, f"trigger gc success ({detail}"
                                  f"{'; ' + d.reason if d.reason else ''})\n")
            if method == "GET" and parts == ["metrics"]:
                node.metrics.observe_storage(node.storage)
                return self._send(200, node.metrics.exposition(), CONTENT_TYPE_LATEST)
        except Exception as exc:
            log.exception("HTTP %s %s failed", method, self.path)
            return self._json(500, {"message": f"{type(exc).__name__}: {exc}", "code": 500})
        return self._json(404, {"message": f"no route for {method} {url.path}", "code": 404})

    def do_GET(self):
        self._route("GET")

    def do_PUT(self):
        self._route("PUT")

    def do_POST(self):
        self._route("POST")


class _Server(ThreadingHTTPServer):
    """Threaded HTTP server; TLS handshakes run in the connection's own thread."""

    daemon_threads = True
    ssl_context: ssl.SSLContext | None = None

    def finish_request(self, request, client_address):
        if self.ssl_context is not None:
            request = self.ssl_context.wrap_socket(request, server_side=True)
        super().finish_request(request, client_address)

    def handle_error(self, request, client_address):
        log.warning("HTTP connection from %s failed", client_address, exc_info=True)


class StatusServer:
    """A ThreadingHTTPServer serving the API above for one node, on its own thread."""

    def __init__(self, node, addr: str, *, ssl_context: ssl.SSLContext | None = None):
        host, _, port = addr.rpartition(":")
        handler = type("PumpStatusHandler", (_Handler,), {"node": node})
        self.httpd = _Server((host, int(port)), handler)
        self.httpd.ssl_context = ssl_context
        self.port = self.httpd.server_address[1]
        self.addr = f"{host}:{self.port}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, args=(0.1,), name="pump-http",
                                        daemon=True)

    def start(self) -> StatusServer:
        self._thread.start()
        log.info("pump HTTP status listening on %s", self.addr)
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
