"""The HTTP plumbing the pump's and the drainer's status APIs share, stdlib only.

An :class:`HttpServer` listens on ``host:port`` (port 0 picks one; ``addr`` and
``port`` then name the bound one), optionally TLS, and serves each connection on
its own daemon thread. Every ``GET``, ``PUT`` and ``POST`` becomes one call of the
owner's ``route(request) -> Response | None``:

- a :class:`Response` is sent as is (``Content-Type`` and ``Content-Length`` set,
  HTTP/1.1 keep-alive);
- ``None`` means no such endpoint: ``404 {"message": "no route for <METHOD> <path>",
  "code": 404}``;
- an exception is logged with its traceback and answered ``500 {"message":
  "<ExceptionType>: <text>", "code": 500}``; the server keeps serving.

With ``allowed_cn`` (``[security] cert-allowed-cn`` of a TLS server) a request whose
client certificate has no listed common name is answered ``403 {"message": ...}``
naming it, whatever the path. Other methods get the standard library's ``501``. The TLS handshake of a connection
runs in that connection's thread, so a slow or broken client never blocks the
listener. ``stop()`` stops accepting and closes the socket.

TiDB multiplexes HTTP and gRPC on one port (cmux); grpcio cannot share a socket,
so both nodes serve HTTP on a second address: :func:`derive_status_addr`.
"""

from __future__ import annotations

import json
import logging
import ssl
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from tidb_binlog.security import peer_common_names, refused_names

__all__ = ["HttpServer", "Request", "Response", "derive_status_addr", "json_response",
           "text_response"]

log = logging.getLogger(__name__)

_POLL_INTERVAL_S = 0.1  # how soon serve_forever notices stop()


def derive_status_addr(grpc_addr: str, status_addr: str = "") -> str:
    """``status_addr`` if set, else the gRPC host with port + 1 (0 stays 0)."""
    if status_addr:
        return status_addr
    host, _, port = grpc_addr.rpartition(":")
    port_n = int(port)
    return f"{host}:{port_n + 1 if port_n else 0}"


@dataclass(frozen=True)
class Request:
    """One request as a route sees it: ``parts`` are the non-empty path segments."""

    method: str
    path: str
    parts: list[str]
    query: dict[str, list[str]]

    @classmethod
    def parse(cls, method: str, target: str) -> Request:
        url = urlsplit(target)
        return cls(method, url.path, [p for p in url.path.split("/") if p],
                   parse_qs(url.query))


@dataclass(frozen=True)
class Response:
    code: int
    body: bytes
    content_type: str


def json_response(code: int, doc) -> Response:
    return Response(code, json.dumps(doc).encode(), "application/json")


def text_response(code: int, text: str) -> Response:
    return Response(code, text.encode(), "text/plain; charset=utf-8")


Route = Callable[[Request], Response | None]


class _Handler(BaseHTTPRequestHandler):
    route: Route = None  # set on a subclass per server
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        log.debug("http %s " + fmt, self.address_string(), *args)

    def _serve(self, method: str) -> None:
        request = Request.parse(method, self.path)
        try:
            response = self._refusal() or self.route(request)
        except Exception as exc:  # answered 500 with the reason, logged with its traceback
            log.exception("HTTP %s %s failed", method, self.path)
            response = json_response(500, {"message": f"{type(exc).__name__}: {exc}",
                                           "code": 500})
        if response is None:
            response = json_response(404, {"message": f"no route for {method} {request.path}",
                                            "code": 404})
        self.send_response(response.code)
        self.send_header("Content-Type", response.content_type)
        self.send_header("Content-Length", str(len(response.body)))
        self.end_headers()
        self.wfile.write(response.body)

    def _refusal(self) -> Response | None:
        """403 for a TLS client whose certificate's common name is not allowed."""
        allowed = self.server.allowed_cn
        if not allowed or not isinstance(self.connection, ssl.SSLSocket):
            return None
        why = refused_names(peer_common_names(self.connection.getpeercert()), allowed)
        if why is None:
            return None
        log.warning("HTTP %s from %s refused: %s", self.path, self.address_string(), why)
        return json_response(403, {"message": why, "code": 403})

    def do_GET(self):
        self._serve("GET")

    def do_PUT(self):
        self._serve("PUT")

    def do_POST(self):
        self._serve("POST")


class _Server(ThreadingHTTPServer):
    """Threaded HTTP server; TLS handshakes run in the connection's own thread."""

    daemon_threads = True
    ssl_context: ssl.SSLContext | None = None
    allowed_cn: tuple[str, ...] = ()

    def finish_request(self, request, client_address):
        if self.ssl_context is not None:
            request = self.ssl_context.wrap_socket(request, server_side=True)
        super().finish_request(request, client_address)

    def handle_error(self, request, client_address):
        log.warning("HTTP connection from %s failed", client_address, exc_info=True)


class HttpServer:
    """``route`` served on ``addr`` from a thread named ``name`` (see the module docstring).

    Binding happens in the constructor (an ``OSError`` when the address is taken);
    ``start()`` begins serving."""

    def __init__(self, addr: str, route: Route, *, name: str = "http",
                 ssl_context: ssl.SSLContext | None = None, allowed_cn: tuple[str, ...] = ()):
        host, _, port = addr.rpartition(":")
        handler = type(f"{name}-handler", (_Handler,), {"route": staticmethod(route)})
        self.httpd = _Server((host, int(port)), handler)
        self.httpd.ssl_context = ssl_context
        self.httpd.allowed_cn = tuple(allowed_cn) if ssl_context is not None else ()
        self.port = self.httpd.server_address[1]
        self.addr = f"{host}:{self.port}"
        self.name = name
        self._thread = threading.Thread(target=self.httpd.serve_forever,
                                        args=(_POLL_INTERVAL_S,), name=name, daemon=True)

    def start(self) -> HttpServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread.is_alive():
            self.httpd.shutdown()
        self.httpd.server_close()
