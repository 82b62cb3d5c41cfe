"""A slow network between the shop and salesrank: an HTTP proxy that can hold replies back."""

import http.client
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit


class Proxy:
    """Forwards every request to `target`, and holds replies back `delay` seconds: those of every
    GET (a slow salesrank under a page), and those of the first `hold` POSTs to `hold_path`, which
    salesrank has answered (and stored) by then (a reply lost to the shop's timeout)."""

    def __init__(self, target: str, *, hold: int = 0, hold_path: str = "", delay: float = 0.0):
        self.target = urlsplit(target).netloc
        self.hold, self.hold_path, self.delay = hold, hold_path, delay
        self.posts: list[tuple[str, bytes, int, bytes]] = []  # (path, body, status, reply) of each POST
        self.lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                proxy.forward(self, "GET")

            def do_POST(self):
                proxy.forward(self, "POST")

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def forward(self, handler: BaseHTTPRequestHandler, method: str) -> None:
        body = handler.rfile.read(int(handler.headers.get("Content-Length") or 0))
        headers = {k: v for k, v in handler.headers.items() if k.lower() not in ("host", "connection")}
        connection = http.client.HTTPConnection(self.target, timeout=30)
        connection.request(method, handler.path, body=body or None, headers=headers)
        reply = connection.getresponse()
        content = reply.read()
        connection.close()
        held = False
        if method == "POST":
            with self.lock:
                self.posts.append((handler.path, body, reply.status, content))
                held = (
                    handler.path == self.hold_path
                    and sum(p == self.hold_path for p, *_ in self.posts) <= self.hold
                )
        if held or method == "GET":
            time.sleep(self.delay)
        try:
            handler.send_response(reply.status)
            handler.send_header("Content-Type", reply.getheader("Content-Type", "application/json"))
            handler.send_header("Content-Length", str(len(content)))
            handler.end_headers()
            handler.wfile.write(content)
        except OSError:  # the shop gave up waiting
            pass

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
