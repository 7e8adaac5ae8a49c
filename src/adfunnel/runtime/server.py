"""The HTTP server of a process: an ASGI app on uvicorn, in one process or in N worker
processes sharing a port (SO_REUSEPORT) under a supervisor.

Every connection gets TCP_NODELAY and one write per response (:class:`CoalescingTransport`);
a worker builds its app with :func:`adfunnel.runtime.asgi.create_app` before it binds.
"""

from __future__ import annotations

import logging
import multiprocessing
import multiprocessing.connection
import signal
import socket
import sys
import threading
import time
from typing import Any

from adfunnel.runtime.asgi import create_app
from adfunnel.runtime.heap import freeze_heap


def listening_socket(host: str, port: int, *, reuse_port: bool) -> socket.socket:
    """A bound TCP socket for ``host:port`` with TCP_NODELAY set (accepted connections
    inherit it on Linux) and, with ``reuse_port``, SO_REUSEPORT: each worker binds its
    own socket to the same port and the kernel spreads new connections over them."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def http_address(sock: socket.socket) -> str:
    """``http://host:port`` of a bound socket (IPv6 hosts in brackets)."""
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


class CoalescingTransport:
    """A connection's transport, writing each response in one ``write``: a block of
    status line and headers is held until the response's first body bytes (or until
    the loop's next turn, or a close) and sent with them.

    uvicorn writes the header block and the body separately: two ``send`` system calls
    and two wake-ups of the reader per response. Measured with ``adfunnel bench http``
    style load (wrk, 16 connections, 2-core VM, four A/B pairs, budget ``local``): server
    CPU per select -6 % to -16 % (~200-350 µs) at 10,000 and 100,000 ads; no change for
    a bodiless 204. Everything but ``write`` and ``close`` is the transport's own."""

    __slots__ = ("_held", "_loop", "_transport")

    def __init__(self, transport: Any, loop: Any) -> None:
        self._transport = transport
        self._loop = loop
        self._held: bytes | None = None

    def write(self, data: bytes) -> None:
        held = self._held
        if held is not None:
            self._held = None
            self._transport.write(held + data)
        elif data[:5] == b"HTTP/" and data[-4:] == b"\r\n\r\n":
            self._held = data
            self._loop.call_soon(self.flush)  # never held past this turn of the loop
        else:
            self._transport.write(data)

    def flush(self) -> None:
        """Write a held header block now."""
        held = self._held
        if held is not None:
            self._held = None
            self._transport.write(held)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


def serving_protocol() -> type:
    """uvicorn's httptools HTTP protocol with, on every accepted connection, TCP_NODELAY
    set and a :class:`CoalescingTransport`.

    TCP_NODELAY: a response written in two parts must not wait for the client's delayed
    ACK (~40 ms per request on one keep-alive connection, as measured under ``uvicorn
    --workers``). uvloop sets it on the connections it accepts; it is set here on every
    connection anyway, so it never depends on the loop or on how the socket was made."""
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    class LeanHttpToolsProtocol(HttpToolsProtocol):
        def connection_made(self, transport: Any) -> None:  # type: ignore[override]
            sock = transport.get_extra_info("socket")
            if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            super().connection_made(CoalescingTransport(transport, self.loop))

    return LeanHttpToolsProtocol


def server_config(app: Any, **config: Any) -> Any:
    """The ``uvicorn.Config`` of a serving process: uvloop, httptools with TCP_NODELAY
    and one write per response on every connection (:func:`serving_protocol`), no
    access log, no proxy-header rewriting (``trusted_proxies`` decides)."""
    import uvicorn

    # proxy_headers off: uvicorn would take X-Forwarded-For from any loopback peer; the
    # client address is the tracker's to decide, from its configured trusted proxies
    # uvicorn's access log off (RequestLog writes ours) and no logging config of its
    # own: its lines go through the process's handler (observability/logs.py)
    options = {"loop": "uvloop", "http": serving_protocol(), "log_level": "warning",
               "access_log": False, "log_config": None, "lifespan": "on",
               "proxy_headers": False, **config}
    return uvicorn.Config(app, **options)


def serve_http(app: Any, host: str, port: int, *, reuse_port: bool = False,
               on_bound: Any = None) -> bool:
    """Serve ``app`` on ``host:port`` in this process until SIGINT or SIGTERM; False when
    the server never started (its lifespan start-up failed). ``on_bound(address)`` is
    called with ``http://host:port`` (the port bound, for port 0) once the socket is
    bound."""
    import uvicorn

    sock = listening_socket(host, port, reuse_port=reuse_port)
    if on_bound is not None:
        on_bound(http_address(sock))
    server = uvicorn.Server(server_config(app, host=host, port=port))
    # the app is built: its heap (catalogue, index, read models) leaves the full
    # collections, whose pauses would stall the loop past a decision's deadline
    freeze_heap()
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
    return bool(server.started)


#: Exit status of a worker that could not start (uvicorn's own start-up failure code).
STARTUP_FAILURE = 3


def worker_main(host: str, port: int) -> None:
    """One of N worker processes: build the runtime from ``ADFUNNEL_*`` (the supervisor
    set them, the token secret included), and only then bind, so connections reach
    workers whose catalogue is loaded. Exits with :data:`STARTUP_FAILURE` when it
    cannot start."""
    try:
        app = create_app()
        started = serve_http(app, host, port, reuse_port=True)
    except Exception:
        logging.getLogger("adfunnel.worker").exception("worker start-up failed")
        sys.exit(STARTUP_FAILURE)
    if not started:
        sys.exit(STARTUP_FAILURE)


def serve_workers(host: str, port: int, workers: int, *, restart_s: float = 1.0,
                  on_start: Any = None) -> int:
    """Run ``workers`` processes (``worker_main``) sharing ``host:port`` through
    SO_REUSEPORT, until SIGINT or SIGTERM. A worker that crashes is started again (at
    most once per ``restart_s`` per worker); one that cannot start stops them all.
    ``on_start()`` is called once the port is known to be free, before the workers start.
    Returns the exit status: 0, or 1 after a start-up failure.

    Raises:
        OSError: the port is taken (checked first with a plain bind).
        ValueError: port 0 (each worker would get its own port).
    """
    if port == 0:
        raise ValueError("several workers need a fixed port")
    listening_socket(host, port, reuse_port=False).close()  # taken → OSError, before any start
    if on_start is not None:
        on_start()
    return _Supervisor(host, port, workers, restart_s).run()


class _Supervisor:
    """Starts, watches and stops the worker processes of :func:`serve_workers`."""

    def __init__(self, host: str, port: int, workers: int, restart_s: float) -> None:
        self.args = (host, port)
        self.restart_s = restart_s
        self.ctx = multiprocessing.get_context("spawn")
        self.procs: list[Any] = [None] * workers
        self.started: list[float] = [0.0] * workers
        self.stopping = threading.Event()
        self.status = 0

    def run(self) -> int:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: self.stopping.set())
        for i in range(len(self.procs)):
            self._start(i)
        while not self.stopping.is_set():
            multiprocessing.connection.wait([p.sentinel for p in self.procs], timeout=0.2)
            for i, p in enumerate(self.procs):
                if p.exitcode is not None and not self.stopping.is_set():
                    self._ended(i, p.exitcode)
        self._stop_all()
        return self.status

    def _ended(self, i: int, code: int) -> None:
        if code == STARTUP_FAILURE:
            self.status = 1
            self.stopping.set()
            return
        log = logging.getLogger("adfunnel.worker")
        log.error("worker %d exited with %d: starting it again", i, code)
        time.sleep(max(0.0, self.started[i] + self.restart_s - time.monotonic()))
        self._start(i)

    def _start(self, i: int) -> None:
        self.procs[i] = self.ctx.Process(target=worker_main, args=self.args,
                                         name=f"adfunnel-worker-{i}")
        self.procs[i].start()
        self.started[i] = time.monotonic()

    def _stop_all(self, timeout_s: float = 10.0) -> None:
        for p in self.procs:
            if p.exitcode is None:
                p.terminate()  # SIGTERM: uvicorn's graceful shutdown
        deadline = time.monotonic() + timeout_s
        for p in self.procs:
            p.join(max(0.0, deadline - time.monotonic()))
            if p.exitcode is None:
                p.kill()
                p.join()
