"""A real HTTP receiver of webhooks for the tests: http.server in a thread, on a free local port."""

import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HANG = -1  # an answer: keep the connection open and say nothing until the receiver stops


class _Server(ThreadingHTTPServer):
    # Room to queue every connection the senders open at once (two senders of 8 threads in a test):
    # past http.server's 5, a connection that finds the queue full waits for its SYN to be sent again,
    # a second or more later, while the accepting thread is slow to run on a loaded machine.
    request_queue_size = 128
    daemon_threads = True


@dataclass(frozen=True)
class Received:
    path: str
    headers: dict[str, str]  # lower-case names
    body: bytes
    at: float  # time.monotonic()


class Receiver:
    """Answers each POST with `answer(request number from 0)`: a status, or HANG. A status of 3xx goes
    with a Location header to `redirect_to`. With `tls`, it serves HTTPS with that context."""

    def __init__(
        self,
        answer: Callable[[int], int] = lambda n: 200,
        redirect_to: str = "",
        address: str = "127.0.0.1",
        tls: ssl.SSLContext | None = None,
    ):
        self.answer, self.redirect_to = answer, redirect_to
        self.received: list[Received] = []
        self.connections = 0
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def setup(self):
                with receiver._lock:
                    receiver.connections += 1
                super().setup()

            def do_POST(self):  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with receiver._lock:
                    number = len(receiver.received)
                    receiver.received.append(
                        Received(
                            self.path, {k.lower(): v for k, v in self.headers.items()}, body, time.monotonic()
                        )
                    )
                status = receiver.answer(number)
                if status == HANG:
                    receiver._stopping.wait(60)
                    return
                self.send_response(status)
                if 300 <= status < 400:
                    self.send_header("Location", receiver.redirect_to)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                """No access log on stderr: what the receiver was sent is in `received`."""

        self.address = address
        self.server = _Server((address, 0), Handler)
        self.port = self.server.server_address[1]
        self.server_names: list[str | None] = []  # the TLS server name (SNI) each client asked for
        if tls is not None:
            tls.sni_callback = lambda sock, name, context: self.server_names.append(name)
            self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def url(self, path: str = "/hook", *, host: str | None = None, scheme: str = "http") -> str:
        return f"{scheme}://{host or self.address}:{self.port}{path}"

    def __enter__(self) -> "Receiver":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stopping.set()
        self.server.shutdown()
        self.server.server_close()
