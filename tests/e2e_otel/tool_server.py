"""Third-party tool APIs (stdlib only, not instrumented): one HTTP server
per tool, `GET /run?latency_s=…&status=…` answers after that long with
that status.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse


class ToolServer:
    def __init__(self, name):
        self.name = name
        self.active = 0
        self.lock = threading.Lock()
        tool = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_GET(self):
                with tool.lock:
                    tool.active += 1
                try:
                    self.run()
                finally:
                    with tool.lock:
                        tool.active -= 1

            def run(self):
                q = parse_qs(urlparse(self.path).query)
                latency = float(q.get("latency_s", ["0.05"])[0])
                status = int(q.get("status", ["200"])[0])
                time.sleep(min(latency, 30.0))
                data = json.dumps({"tool": tool.name, "ok": status < 400}).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the caller's timeout fired first

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()
