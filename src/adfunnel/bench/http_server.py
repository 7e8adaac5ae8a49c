"""The HTTP benchmark's server under test and its gauges: ``adfunnel serve --workers W``
started and waited for until every worker is ready (:class:`BenchServer`), the CPU
seconds of its processes (:func:`cpu_seconds` over :func:`process_tree`) and of the load
generator (:func:`generator_cpu_seconds`), and the no-op latency probe that runs beside
the load (:class:`NoopProbe`).
"""

from __future__ import annotations

import http.client
import os
import resource
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from adfunnel.sim.server_proc import ManagedProcess

#: The bare route of the server (204, no work): the baseline and the probe's target.
NOOP_PATH = "/v1/bench/noop"


class BenchServer:
    """``adfunnel serve --workers W`` on ``url``, ready on every worker (``extra_env``:
    settings beside this process's environment)."""

    def __init__(self, url: str, workers: int, log_path: Path | None, timeout_s: float,
                 extra_env: dict[str, str] | None = None) -> None:
        args = ["serve", "--database-url", url, "--clock", "system", "--workers", str(workers)]
        self.proc = ManagedProcess(args, health_path="/readyz", log_path=log_path,
                                   timeout_s=timeout_s, extra_env=extra_env)
        self.url = self.proc.url
        try:
            wait_workers(self.url, workers, timeout_s)
        except BaseException:
            self.proc.stop()
            raise

    def pids(self) -> list[int]:
        return process_tree(self.proc.proc.pid)

    def __enter__(self) -> BenchServer:
        return self

    def __exit__(self, *_: object) -> None:
        self.proc.stop()


def wait_workers(url: str, workers: int, timeout_s: float) -> set[int]:
    """Poll ``/readyz`` on fresh connections until ``workers`` distinct worker pids have
    answered 200 (the kernel spreads new connections over SO_REUSEPORT sockets).

    Raises:
        RuntimeError: fewer ready workers seen within ``timeout_s``.
    """
    seen: set[int] = set()
    deadline = time.monotonic() + timeout_s
    # one client (a new one per poll builds a TLS context, ~20 ms of CPU), with no kept
    # connection: each poll is a new connection, which the kernel may give any worker
    with httpx.Client(timeout=5.0, limits=httpx.Limits(max_keepalive_connections=0)) as client:
        while time.monotonic() < deadline:
            try:
                r = client.get(url + "/readyz")
                if r.status_code == 200:
                    seen.add(int(r.json().get("pid", 0)))
            except httpx.HTTPError:
                pass
            if len(seen) >= workers:
                return seen
            time.sleep(0.02)
    raise RuntimeError(f"only {len(seen)} of {workers} workers ready in {timeout_s} s")


def process_tree(root: int) -> list[int]:
    """``root`` and every descendant process (from ``/proc/*/stat``)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds used so far by ``pids`` (those still running)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15)
    return total / tick


class NoopProbe:
    """A thread sending ``GET /v1/bench/noop`` on one keep-alive connection every
    ``interval_s`` seconds, timing each answer (ms): how long the server's other work
    waits while decisions run (on the worker its connection landed on)."""

    def __init__(self, url: str, interval_s: float = 0.02) -> None:
        host, port = url.removeprefix("http://").split(":")
        self.conn = http.client.HTTPConnection(host, int(port), timeout=30)
        self.interval_s = interval_s
        self.latencies_ms: list[float] = []
        self.errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="noop-probe", daemon=True)

    def __enter__(self) -> NoopProbe:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=60)
        self.conn.close()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            t0 = time.perf_counter()
            try:
                self.conn.request("GET", NOOP_PATH)
                self.conn.getresponse().read()
            except (OSError, http.client.HTTPException):
                self.errors += 1
                self.conn.close()
                continue
            self.latencies_ms.append((time.perf_counter() - t0) * 1000.0)

    def summary(self) -> dict[str, Any]:
        lat = np.array(self.latencies_ms) if self.latencies_ms else None
        pct = (lambda q: None) if lat is None else (
            lambda q: round(float(np.percentile(lat, q)), 2))
        return {"probes": len(self.latencies_ms), "p50_ms": pct(50), "p99_ms": pct(99),
                "max_ms": None if lat is None else round(float(lat.max()), 2)}


def generator_cpu_seconds() -> float:
    """User + system CPU seconds of this process and of its reaped children: the load
    generator's, whether it ran here (the asyncio client) or as a child that has exited
    (``wrk``; the server, a child still running, is not counted until it is reaped).
    Includes the :class:`NoopProbe` thread's few requests."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime
