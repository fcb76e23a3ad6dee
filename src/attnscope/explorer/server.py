"""The explorer's HTTP side: the page, and a JSON and bytes API over a store reader
(:class:`attnscope.explorer.reader.StoreReader`).

Read-only (GET and HEAD; other methods get 405), HTTP/1.1 with keep-alive, a timeout per
connection, a listen backlog for bursts of requests, the ``Host`` header checked against the
loopback names and the address served, or any IP address where that is every interface (a page
of another site cannot read the results through DNS rebinding), and every error, the standard
library's own included, answered as one line of JSON (``{"error": ...}``).
"""

from __future__ import annotations

import ipaddress
import json
import logging
import re
import socket
from functools import cache
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

from attnscope.explorer.errors import BadRequest, ExplorerError, NotFound
from attnscope.explorer.reader import StoreReader
from attnscope.store import HEAD_MEAN

log = logging.getLogger("attnscope")

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
"""``Host`` names always accepted (the server binds to loopback by default)."""
WILDCARD_ADDRESSES = frozenset({"0.0.0.0", "::"})
"""Bind addresses of every interface: a ``Host`` that is any IP address is then accepted."""
REQUEST_QUEUE_SIZE = 128
"""The listen backlog: a burst of page requests waits in it instead of losing SYNs."""
CONNECTION_TIMEOUT_S = 15
"""A connection idle (or sending half a request) this long is closed, freeing its thread."""
INTEGER = re.compile(r"-?[0-9]{1,64}")
"""An integer query parameter: ASCII digits only (``int()`` would also take ``1_0``, `` 2 `` and
other scripts' digits)."""


def _static(name: str) -> bytes:
    return resources.files("attnscope.explorer").joinpath("static", name).read_bytes()


@cache
def plotly_js() -> bytes:
    """plotly.js as the ``plotly`` Python package ships it (no CDN, no copy in this repo)."""
    return resources.files("plotly").joinpath("package_data", "plotly.min.js").read_bytes()


CONTENT_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript", ".css": "text/css"}


def host_name(header: str | None) -> str | None:
    """The host name of a ``Host`` header, without its port and IPv6 brackets, lower-case."""
    if not header:
        return None
    if header.startswith("["):
        return header[1 : header.find("]")].lower() if "]" in header else None
    return header.rsplit(":", 1)[0].lower() if header.count(":") == 1 else header.lower()


def _is_ip(name: str) -> bool:
    """Whether ``name`` is an IP address (IPv4 or IPv6), not a host name."""
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def host_allowed(header: str | None, bind: str) -> bool:
    """Whether a ``Host`` header names a server listening on ``bind``: a loopback name, ``bind``
    itself, or, where ``bind`` is every interface (0.0.0.0, ::), any IP address. DNS rebinding
    needs a host name of the attacker's, so an IP address is never another site's; other host
    names are refused."""
    name = host_name(header)
    if name is None:
        return False
    if name in LOOPBACK_NAMES or name == bind.lower():
        return True
    return bind in WILDCARD_ADDRESSES and _is_ip(name)


def query_int(query: dict[str, str], name: str, default: int | None = None) -> int:
    """The integer parameter ``name`` of a query (``default`` when absent and not None)."""
    if name not in query and default is not None:
        return default
    text = query.get(name)
    if text is None:
        raise BadRequest(f"missing parameter {name!r}")
    if not INTEGER.fullmatch(text):
        raise BadRequest(f"{name}={text!r} is not an integer (ASCII digits with an optional minus sign)")
    return int(text)


def query_str(query: dict[str, str], name: str, default: str | None = None) -> str:
    """The text parameter ``name`` of a query (``default`` when absent and not None)."""
    if name not in query and default is not None:
        return default
    if name not in query:
        raise BadRequest(f"missing parameter {name!r}")
    return query[name]


def make_handler(reader: StoreReader, bind: str = "127.0.0.1") -> type:
    """A request handler class bound to ``reader`` (anything with its methods), for a server
    listening on ``bind`` (the ``Host`` headers :func:`host_allowed` accepts; GET and HEAD only:
    the server never writes)."""

    class Handler(BaseHTTPRequestHandler):
        server_version = "attnscope-explorer"
        protocol_version = "HTTP/1.1"
        timeout = CONNECTION_TIMEOUT_S

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base class's name)
            log.debug("%s " + format, self.address_string(), *args)

        def _send(
            self,
            body: bytes,
            content_type: str,
            headers: dict[str, str] | None = None,
            status: HTTPStatus = HTTPStatus.OK,
        ) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("X-Content-Type-Options", "nosniff")
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _json(self, obj: Any, status: HTTPStatus = HTTPStatus.OK, headers: dict | None = None) -> None:
            self._send(json.dumps(obj, allow_nan=False).encode(), "application/json", headers, status)

        def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
            """The standard library's errors (a malformed request line, a header too long...) as
            JSON too; the connection is closed after them."""
            self.close_connection = True
            text = "; ".join(t for t in (message or HTTPStatus(code).phrase, explain) if t)
            self._json({"error": text}, HTTPStatus(code), {"Connection": "close"})

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            if not host_allowed(self.headers.get("Host"), bind):
                error = f"Host {self.headers.get('Host')!r} not served; open the URL the server printed"
                self._json({"error": error}, HTTPStatus.MISDIRECTED_REQUEST)
                return
            url = urlparse(self.path)
            query = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
            try:
                self._route(url.path, query)
            except ExplorerError as err:
                self._json({"error": str(err)}, HTTPStatus(err.status))
            except ConnectionError:  # the client left mid-answer: nothing to answer
                self.close_connection = True
            except Exception:  # a bug, not the request's fault: logged once, answered as JSON
                log.exception("attnscope explore: %s failed", self.path)
                error = "internal error; the server's terminal shows its traceback"
                self._json({"error": error}, HTTPStatus.INTERNAL_SERVER_ERROR)

        do_HEAD = do_GET  # noqa: N815 (http.server's name); _send leaves the body out

        def _not_allowed(self) -> None:
            self._json(
                {"error": f"{self.command}: the explorer is read-only (GET, HEAD)"},
                HTTPStatus.METHOD_NOT_ALLOWED,
                {"Allow": "GET, HEAD"},
            )

        do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _not_allowed  # noqa: N815

        def _route(self, path: str, q: dict[str, str]) -> None:
            if path in ("/", "/index.html"):
                self._send(_static("index.html"), CONTENT_TYPES[".html"])
            elif path == "/static/plotly.min.js":
                self._send(plotly_js(), CONTENT_TYPES[".js"], {"Cache-Control": "max-age=86400"})
            elif path in ("/static/app.js", "/static/style.css"):
                self._send(_static(Path(path).name), CONTENT_TYPES[Path(path).suffix])
            elif path == "/favicon.ico":
                self._send(b"", "image/x-icon", status=HTTPStatus.NO_CONTENT)
            elif path == "/api/index":
                self._json(reader.index())
            elif path == "/api/stats":
                self._json(reader.stats())
            elif path == "/api/prompt":
                self._json(reader.prompt(query_str(q, "store"), query_str(q, "group")))
            elif path == "/api/metrics":
                store, group = query_str(q, "store"), query_str(q, "group")
                head, kind = query_int(q, "head", HEAD_MEAN), query_str(q, "kind", "weights")
                self._json(reader.metrics(store, group, head, kind))
            elif path == "/api/head":
                self._json(reader.head(query_str(q, "store"), query_int(q, "layer"), query_int(q, "head")))
            elif path == "/api/map":
                store, group, level = (query_str(q, name) for name in ("store", "group", "level"))
                layer, head = query_int(q, "layer"), query_int(q, "head", HEAD_MEAN)
                args = (group, level, layer, head, query_str(q, "kind", "weights"))
                if q.get("minus"):
                    values, _ = reader.difference(store, q["minus"], *args)
                else:
                    values = reader.map(store, *args)
                headers = {"X-Shape": ",".join(map(str, values.shape))}
                self._send(values.tobytes(), "application/octet-stream", headers)
            else:
                raise NotFound(f"no such page {path}")

    return Handler


class ExplorerServer(ThreadingHTTPServer):
    """A threading HTTP server with a deep listen backlog, on IPv4 or IPv6 as its host resolves."""

    request_queue_size = REQUEST_QUEUE_SIZE
    daemon_threads = True

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler]):
        self.address_family = socket.getaddrinfo(*address, type=socket.SOCK_STREAM)[0][0]
        super().__init__(address, handler)


def make_server(reader: StoreReader, host: str = "127.0.0.1", port: int = 8765) -> ExplorerServer:
    """The HTTP server over ``reader`` on ``host`` (``port`` 0: a free port), accepting the ``Host``
    headers :func:`host_allowed` accepts for ``host``; call ``serve_forever``."""
    return ExplorerServer((host, port), make_handler(reader, host))
