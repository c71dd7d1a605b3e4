"""A tiny OTLP/HTTP trace receiver (stdlib only): `POST /v1/traces`
bodies (protobuf, gzip or not, with a Content-Length or chunked) are
appended, as the exporter sent them, to one file of varint
length-delimited `ExportTraceServiceRequest`s — what `overtime diagnose
--otlp-proto` reads.
"""

from __future__ import annotations

import gzip
import threading
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


class Receiver:
    def __init__(self, path):
        self.path = path
        self.lock = threading.Lock()
        self.requests = 0
        self.bytes = 0
        self.rejected = 0
        open(path, "wb").close()
        me = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def body(self):
                # Python's exporter sends a Content-Length; Node's pipes its
                # gzip stream, chunked.
                if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
                    out = bytearray()
                    while True:
                        size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                        if size == 0:
                            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                                pass  # trailers
                            return bytes(out)
                        out += self.rfile.read(size)
                        self.rfile.readline()
                return self.rfile.read(int(self.headers.get("Content-Length") or 0))

            def do_POST(self):
                data = self.body()
                enc = (self.headers.get("Content-Encoding") or "").lower()
                ok = self.path.rstrip("/") == "/v1/traces" and "protobuf" in (self.headers.get("Content-Type") or "")
                if ok and enc == "gzip":
                    data = gzip.decompress(data)
                elif ok and enc == "deflate":
                    data = zlib.decompress(data)
                if ok:
                    me.record(data)
                    self.send_response(200)
                else:
                    me.rejected += 1
                    self.send_response(415)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def record(self, data: bytes):
        with self.lock:
            with open(self.path, "ab") as f:
                f.write(varint(len(data)) + data)
            self.requests += 1
            self.bytes += len(data)

    def size(self) -> int:
        with self.lock:
            return self.bytes

    def file_size(self) -> int:
        import os

        with self.lock:
            return os.path.getsize(self.path)

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()
