"""The dashboard's HTTP server: a page, its JSON, worker logs and Prometheus' /metrics.

Closed like the rest of zmesh: every request needs the dashboard's secret, given once in
the URL it prints (`/?token=...`, which sets an HttpOnly same-site cookie and redirects)
or as `Authorization: Bearer <secret>` (what a Prometheus scrape config sends). It binds
loopback unless told otherwise. The standard library's threading HTTP server is enough:
one operator and a scraper, each request a few node queries.
"""

from __future__ import annotations

import hmac
import json
import secrets
import threading
from http import HTTPStatus
from http.cookies import SimpleCookie
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from zmesh.dashboard.page import PAGE
from zmesh.dashboard.state import MeshReader
from zmesh.security.keys import ClusterCredentials

COOKIE = "zmesh_dashboard"


class Dashboard:
    """A running dashboard: `url` (with its secret) and `stop()`."""

    def __init__(self, address: str | None, host: str = "127.0.0.1", port: int = 0,
                 token: str | None = None, credentials: ClusterCredentials | None = None
                 ) -> None:
        self.token = token or secrets.token_urlsafe(24)
        self.reader = MeshReader(address, credentials)
        handler = type("Handler", (_Handler,), {"dash": self})
        self.httpd = ThreadingHTTPServer((host, port), handler)
        self.httpd.daemon_threads = True
        self.host, self.port = host, int(self.httpd.server_address[1])
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/?token={self.token}"

    def start(self) -> Dashboard:
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True,
                                        name="zmesh-dashboard")
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        self.httpd.serve_forever()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.reader.close()


class _Handler(BaseHTTPRequestHandler):
    dash: Dashboard
    server_version = "zmesh-dashboard"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib's name
        pass  # quiet: the operator's terminal is not an access log

    def _authorized(self, query: dict[str, list[str]]) -> bool:
        given = []
        auth = self.headers.get("Authorization", "")
        if auth.startswith("Bearer "):
            given.append(auth[len("Bearer "):])
        cookie = SimpleCookie(self.headers.get("Cookie", ""))
        if COOKIE in cookie:
            given.append(cookie[COOKIE].value)
        given += query.get("token", [])
        want = self.dash.token.encode()
        return any(hmac.compare_digest(g.encode(), want) for g in given)

    def do_GET(self) -> None:  # noqa: N802 - stdlib's name
        parts = urlsplit(self.path)
        query = parse_qs(parts.query)
        if not self._authorized(query):
            self._send(HTTPStatus.UNAUTHORIZED, b"zmesh dashboard: open the URL it printed "
                       b"(with ?token=...), or send Authorization: Bearer <token>\n",
                       "text/plain; charset=utf-8")
            return
        if "token" in query:  # remember it in a cookie, and take it out of the address bar
            self.send_response(HTTPStatus.SEE_OTHER)
            self.send_header("Set-Cookie", f"{COOKIE}={self.dash.token}; HttpOnly; "
                                           "SameSite=Strict; Path=/")
            self.send_header("Location", parts.path or "/")
            self.end_headers()
            return
        try:
            self._route(parts.path, query)
        except Exception as exc:  # noqa: BLE001 - a failed query must not kill the server
            self._json({"error": f"{type(exc).__name__}: {exc}"}, HTTPStatus.BAD_GATEWAY)

    def _route(self, path: str, query: dict[str, list[str]]) -> None:
        if path == "/":
            self._send(HTTPStatus.OK, PAGE.encode(), "text/html; charset=utf-8")
        elif path == "/api/state":
            self._json(self.dash.reader.state())
        elif path == "/api/logs":
            node = (query.get("node") or [""])[0]
            sel: dict[str, Any] = {}
            if query.get("actor"):
                sel["actor"] = query["actor"][0]
            if query.get("pid"):
                sel["pid"] = int(query["pid"][0])
            self._json(self.dash.reader.logs(node, sel))
        elif path == "/metrics":
            from zmesh.dashboard.prometheus import exposition

            self._send(HTTPStatus.OK, exposition(self.dash.reader.metrics),
                       "text/plain; version=0.0.4; charset=utf-8")
        else:
            self._send(HTTPStatus.NOT_FOUND, b"not found\n", "text/plain")

    def _json(self, value: Any, status: HTTPStatus = HTTPStatus.OK) -> None:
        self._send(status, json.dumps(value, default=str).encode(), "application/json")

    def _send(self, status: HTTPStatus, body: bytes, ctype: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)
