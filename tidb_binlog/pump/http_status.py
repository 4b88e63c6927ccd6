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

from google.protobuf import text_format

from tidb_binlog import binlog as bl
from tidb_binlog.errors import BinlogError
from tidb_binlog.http_server import (
    HttpServer,
    Request,
    Response,
    derive_status_addr,
    json_response,
    text_response,
)
from tidb_binlog.pump.metrics import CONTENT_TYPE_LATEST

__all__ = ["StatusServer", "derive_status_addr", "status_document"]

log = logging.getLogger(__name__)


def _record(status) -> dict:
    return json.loads(status.to_json())


def status_document(node) -> dict:
    return {
        "status": {s.node_id: _record(s) for s in node.pumps()},
        "CommitTS": node.get_ts(),
        "Checkpoint": {"gcTS": node.storage.gc_ts, "maxCommitTS": node.storage.max_commit_ts},
        "ErrMsg": node.storage_error(),
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


def _route(node, req: Request) -> Response | None:
    """The endpoints above for ``node``; ``None`` for any other (a 404)."""
    parts = req.parts
    if req.method == "GET" and parts == ["status"]:
        return json_response(200, status_document(node))
    if req.method == "GET" and parts == ["drainers"]:
        return json_response(200, [_record(d) for d in node.drainers()])
    if req.method == "PUT" and len(parts) == 3 and parts[0] == "state":
        try:
            message = node.apply_action(parts[1], parts[2])
        except BinlogError as exc:
            return json_response(400, {"message": str(exc), "code": 400})
        return json_response(200, {"message": message, "code": 200})
    if req.method == "GET" and len(parts) == 3 and parts[:2] == ["debug", "binlog"]:
        try:
            ts = int(parts[2])
        except ValueError:
            return text_response(400, f"ts {parts[2]!r} is not an integer TSO\n")
        b = node.storage.get_binlog(ts)
        if b is None:
            return text_response(404, f"no binlog stored under ts {ts}\n")
        return text_response(200, _dump_binlog(b))
    if req.method == "POST" and parts == ["debug", "gc", "trigger"]:
        force = req.query.get("force", ["false"])[0].lower() in ("1", "true")
        d = node.gc(force=force)
        detail = f"gc_ts={d.gc_ts}" if d.gc_ts is not None else "nothing collected"
        return text_response(200, f"trigger gc success ({detail}"
                             f"{'; ' + d.reason if d.reason else ''})\n")
    if req.method == "GET" and parts == ["metrics"]:
        node.metrics.observe_storage(node.storage)
        return Response(200, node.metrics.exposition(), CONTENT_TYPE_LATEST)
    return None


class StatusServer:
    """The API above for one node on its own thread
    (:class:`tidb_binlog.http_server.HttpServer`: unknown routes 404, failures 500)."""

    def __init__(self, node, addr: str, *, ssl_context: ssl.SSLContext | None = None,
                 allowed_cn: tuple[str, ...] = ()):
        self.node = node
        self._http = HttpServer(addr, lambda req: _route(node, req), name="pump-http",
                                ssl_context=ssl_context, allowed_cn=allowed_cn)
        self.httpd = self._http.httpd
        self.port = self._http.port
        self.addr = self._http.addr

    def start(self) -> StatusServer:
        self._http.start()
        log.info("pump HTTP status listening on %s", self.addr)
        return self

    def stop(self) -> None:
        self._http.stop()
