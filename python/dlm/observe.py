"""The core's metrics over HTTP, for Prometheus: `serve_metrics()` starts what `dlm serve` offers at
`/metrics` (the same recorder of the Rust crate, `metrics_exporter_prometheus`), in a daemon thread
of this process.

    import dlm
    server = dlm.serve_metrics(port=9464)   # http://127.0.0.1:9464/metrics
    ...
    server.shutdown()
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from ._dlm import enable_metrics, metrics_text

__all__ = ["serve_metrics", "metrics_text", "enable_metrics"]


class _Metrics(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if self.path.split("?", 1)[0] != "/metrics":
            self.send_error(404)
            return
        body = metrics_text().encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # scrapes are not worth a line each
        pass


def serve_metrics(port: int = 9464, host: str = "127.0.0.1") -> ThreadingHTTPServer:
    """Serve the core's metrics at http://HOST:PORT/metrics from a daemon thread (port 0: a free
    one, see `server.server_address`). Recording starts now. Stop it with `server.shutdown()`."""
    enable_metrics()
    server = ThreadingHTTPServer((host, port), _Metrics)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="dlm-metrics", daemon=True).start()
    return server
