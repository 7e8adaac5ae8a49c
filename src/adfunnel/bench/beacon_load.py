"""A beacon load generator: impression beacons (``GET /i?t=<token>``) from several
client processes, closed loop or paced, for ``adfunnel bench events``.

Every beacon carries its own signed token (a distinct impression id) for a real
campaign, a browser ``User-Agent`` and the client's address in ``X-Forwarded-For``
(:func:`client_address`: the server runs behind a trusted proxy, as a tracker does;
:data:`BEACONS_PER_ADDRESS` beacons per address), written as a pre-encoded HTTP/1.1
keep-alive request on a raw asyncio (uvloop) stream: a full HTTP client library costs
more CPU per request than the tracker's own answer, so it would measure the client.
Tokens and requests are built, and every connection opened (and answered once on
``/healthz``), before the clock starts; the processes start together.

- **Closed loop** (``rate_per_s`` None): each connection sends its next beacon when
  the previous answer arrives, for ``duration_s`` seconds, cycling through its
  process's ``tokens`` distinct tokens (``repeats`` counts beacons past them).
- **Paced** (``rate_per_s``): beacon ``m`` of ``round(rate × duration)`` is due at
  ``start + m / rate`` on connection ``m mod connections``; a connection whose previous
  answer is late sends at once, so the achieved rate shows what the server kept up
  with and ``late_p99_ms`` how far sends fell behind schedule; beacons still unsent
  when the window ends are not sent (``unsent``).

Latency is client-side (ms), from the request's first byte written to the answer's
last byte read. All times here are network (monotonic) time.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing as mp
import os
import queue
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import uvloop

from adfunnel.tracking.token import TokenClaims, sign

#: The User-Agent of every beacon (a browser's: tier-1 rules let it through).
USER_AGENT = ("Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 "
              "(KHTML, like Gecko) Chrome/124.0.0.0 Safari/537.36")
#: Beacons sent from one client address (tier-2 scoring counts impressions per address:
#: a real audience is many people, each seeing a few ads).
BEACONS_PER_ADDRESS = 10
#: Seconds a token stays valid (longer than any run).
TOKEN_TTL_S = 3_600
#: Seconds after the last process is ready before the clock starts.
START_DELAY_S = 0.2


@dataclass(frozen=True)
class Target:
    """A campaign the beacons are for: ids, billing type and token price (micros, in
    the bid's unit: per mille for CPM)."""

    campaign_id: int
    ad_id: int
    billing_type: str
    price_micros: int


@dataclass(frozen=True)
class BeaconLoad:
    """One load window.

    Args:
        url: the server, ``http://host:port``.
        secret: the token secret the server verifies with.
        targets: campaigns, used in turn.
        id_prefix: impression ids are ``<id_prefix><process>x<n>`` (distinct per run).
        connections: keep-alive connections over all processes (≥ processes).
        processes: client processes (≥ 1).
        duration_s: seconds of load.
        rate_per_s: beacons offered per second (paced), or None (closed loop).
        tokens: distinct tokens per process in a closed loop.
        path: the beacon route.
        placement: the tokens' placement.
    """

    url: str
    secret: str
    targets: tuple[Target, ...]
    id_prefix: str
    connections: int = 64
    processes: int = 1
    duration_s: float = 5.0
    rate_per_s: float | None = None
    tokens: int = 20_000
    path: str = "/i"
    placement: str = "bench"

    def __post_init__(self) -> None:
        if self.processes < 1 or self.connections < self.processes:
            raise ValueError("processes must be >= 1 and connections >= processes")
        if not self.duration_s > 0 or not self.targets:
            raise ValueError("duration_s must be > 0 and targets not empty")
        if self.rate_per_s is not None and not self.rate_per_s > 0:
            raise ValueError("rate_per_s must be > 0 or None")

    def beacons(self) -> int | None:
        """Beacons of a paced window (None: closed loop)."""
        if self.rate_per_s is None:
            return None
        return max(1, round(self.rate_per_s * self.duration_s))


class LoadPool:
    """``processes`` spawned client processes, started at once (their imports overlap
    whatever the caller does next) and kept for every window :meth:`run` gives them."""

    def __init__(self, processes: int) -> None:
        if processes < 1:
            raise ValueError(f"processes must be >= 1, got {processes}")
        ctx = mp.get_context("spawn")
        self.processes = processes
        self._results: Any = ctx.Queue()
        self._go = ctx.Event()
        self._start_at = ctx.Value("d", 0.0)
        self._commands: list[Any] = [ctx.Queue() for _ in range(processes)]
        self._procs = [ctx.Process(target=_process_main,
                                   args=(i, self._commands[i], self._results, self._go,
                                         self._start_at),
                                   name=f"beacon-load-{i}", daemon=True)
                       for i in range(processes)]
        for proc in self._procs:
            proc.start()

    def run(self, load: BeaconLoad, timeout_s: float = 120.0) -> dict[str, Any]:
        """Run one window of ``load`` (``load.processes`` must be this pool's); the merged
        figures:

        ``answers``, ``answers_per_s`` (answers ÷ the window's wall seconds),
        ``statuses`` (answers by HTTP status), ``errors`` (connections that failed),
        ``p50_ms``, ``p99_ms``, ``max_ms``, ``repeats``, ``client_busy_cores`` (the
        clients' CPU seconds ÷ wall seconds), ``wall_s``; paced also ``offered_per_s``,
        ``beacons`` (due in the window), ``unsent``, ``late_p50_ms``, ``late_p99_ms``.

        Raises:
            ValueError: ``load.processes`` is not this pool's.
            RuntimeError: a process failed, or did not get ready or report within
                ``timeout_s``.
        """
        if load.processes != self.processes:
            raise ValueError(f"the pool has {self.processes} processes, the load "
                             f"{load.processes}")
        self._go.clear()
        for commands in self._commands:
            commands.put(load)
        self._collect(timeout_s)  # every process ready: tokens signed, connected
        self._start_at.value = time.monotonic() + START_DELAY_S
        self._go.set()
        parts = self._collect(START_DELAY_S + load.duration_s + timeout_s)
        self._go.clear()
        return _merge(load, parts)

    def _collect(self, timeout_s: float) -> list[Any]:
        """One report from every process."""
        out: list[Any] = []
        deadline = time.monotonic() + timeout_s
        while len(out) < self.processes:
            try:
                kind, payload = self._results.get(timeout=0.25)
            except queue.Empty:
                dead = [p.name for p in self._procs if not p.is_alive()]
                if dead or time.monotonic() > deadline:
                    raise RuntimeError(f"beacon load processes did not report "
                                       f"(exited: {dead or 'none'})") from None
                continue
            if kind == "error":
                raise RuntimeError(f"beacon load process failed: {payload}")
            out.append(payload)
        return out

    def close(self) -> None:
        """Stop the processes."""
        for commands in self._commands:
            with contextlib.suppress(ValueError, OSError):
                commands.put(None)
        for proc in self._procs:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=5)

    def __enter__(self) -> LoadPool:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def run_load(load: BeaconLoad, timeout_s: float = 120.0) -> dict[str, Any]:
    """One window of ``load`` from a pool of its own (:meth:`LoadPool.run`)."""
    with LoadPool(load.processes) as pool:
        return pool.run(load, timeout_s)


# ---- one client process ------------------------------------------------------------------


def _process_main(index: int, commands: Any, results: Any, go: Any, start_at: Any) -> None:
    while (load := commands.get()) is not None:
        try:
            payload = uvloop.run(_process(load, index, results, go, start_at))
        except BaseException as exc:  # report, then let the parent decide
            results.put(("error", f"{type(exc).__name__}: {exc}"))
            return
        results.put(("done", payload))


def share(total: int, parts: int, index: int) -> range:
    """The ``index``-th of ``parts`` near-equal contiguous shares of ``range(total)``."""
    lo = total * index // parts
    return range(lo, total * (index + 1) // parts)


async def _process(load: BeaconLoad, index: int, results: Any, go: Any,
                   start_at: Any) -> dict[str, Any]:
    conns = share(load.connections, load.processes, index)
    host, port = load.url.removeprefix("http://").rsplit(":", 1)
    total = load.beacons()
    if total is None:
        schedule: list[list[int]] | None = None
        numbers = list(range(load.tokens))
    else:  # beacon m goes on connection m mod connections
        schedule = [list(range(c, total, load.connections)) for c in conns]
        numbers = sorted(m for s in schedule for m in s)
    requests = dict(zip(numbers, _requests(load, index, host, numbers), strict=True))
    streams = [await _open(host, int(port)) for _ in conns]
    results.put(("ready", index))
    await asyncio.get_running_loop().run_in_executor(None, go.wait)
    t0 = start_at.value
    await asyncio.sleep(max(0.0, t0 - time.monotonic()))
    cpu0 = os.times()
    tally = _Tally()
    stop_at = t0 + load.duration_s
    if schedule is None:
        cycle = list(requests.values())
        n = len(conns)
        tasks = [_closed(s, cycle[i::n] or cycle, stop_at, tally) for i, s in enumerate(streams)]
    else:
        rate = load.rate_per_s or 1.0
        tasks = [_paced(s, [(t0 + m / rate, requests[m]) for m in sched], stop_at, tally)
                 for s, sched in zip(streams, schedule, strict=True)]
    await asyncio.gather(*tasks)
    wall = time.monotonic() - t0
    cpu1 = os.times()
    for _, writer in streams:
        writer.close()
    return {**tally.raw(), "wall_s": wall,
            "cpu_s": (cpu1.user + cpu1.system) - (cpu0.user + cpu0.system),
            "distinct": len(requests)}


def _requests(load: BeaconLoad, index: int, host: str, numbers: list[int]) -> list[bytes]:
    """The pre-encoded beacons ``numbers`` of process ``index`` (signed now)."""
    key = load.secret.encode()
    now = int(time.time())
    out = []
    for m in numbers:
        t = load.targets[m % len(load.targets)]
        per_impression = t.price_micros // 1000 if t.billing_type == "CPM" else 0
        claims = TokenClaims(f"{load.id_prefix}{index}x{m}", t.ad_id, t.campaign_id,
                             t.price_micros, t.billing_type, load.placement, now,
                             now + TOKEN_TTL_S, per_impression)
        out.append(f"GET {load.path}?t={sign(claims, key)} HTTP/1.1\r\nhost: {host}\r\n"
                   f"user-agent: {USER_AGENT}\r\n"
                   f"x-forwarded-for: {client_address(index, m)}\r\n\r\n".encode())
    return out


def client_address(group: int, n: int) -> str:
    """The client address of beacon ``n`` of ``group`` (0-255): ``10.<group>.x.y``, one
    per :data:`BEACONS_PER_ADDRESS` beacons (private addresses: in no crawler or
    datacenter list, so tier 1 lets them through)."""
    k = n // BEACONS_PER_ADDRESS
    return f"10.{group % 256}.{(k >> 8) % 256}.{k % 256}"


_Stream = tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def _open(host: str, port: int) -> _Stream:
    reader, writer = await asyncio.open_connection(host, port)
    await exchange(reader, writer, f"GET /healthz HTTP/1.1\r\nhost: {host}\r\n\r\n".encode())
    return reader, writer


async def exchange(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                   request: bytes) -> int:
    """Send one request, read its whole answer; the HTTP status."""
    writer.write(request)
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    status = int(lines[0].split(b" ", 2)[1])
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
            if length:
                await reader.readexactly(length)
            break
    return status


class _Tally:
    def __init__(self) -> None:
        self.latencies_ms: list[float] = []
        self.late_ms: list[float] = []
        self.statuses: dict[int, int] = {}
        self.errors = 0
        self.repeats = 0
        self.unsent = 0

    def raw(self) -> dict[str, Any]:
        return {"latencies_ms": np.asarray(self.latencies_ms, dtype=np.float32),
                "late_ms": np.asarray(self.late_ms, dtype=np.float32),
                "statuses": self.statuses, "errors": self.errors, "repeats": self.repeats,
                "unsent": self.unsent}


async def _closed(stream: _Stream, cycle: list[bytes], stop_at: float, tally: _Tally) -> None:
    reader, writer = stream
    sent = 0
    try:
        while time.monotonic() < stop_at:
            t0 = time.perf_counter()
            status = await exchange(reader, writer, cycle[sent % len(cycle)])
            tally.latencies_ms.append((time.perf_counter() - t0) * 1000.0)
            tally.statuses[status] = tally.statuses.get(status, 0) + 1
            sent += 1
    except (OSError, asyncio.IncompleteReadError, ValueError):
        tally.errors += 1
    tally.repeats += max(0, sent - len(cycle))


async def _paced(stream: _Stream, due: list[tuple[float, bytes]], stop_at: float,
                 tally: _Tally) -> None:
    reader, writer = stream
    try:
        for k, (at, request) in enumerate(due):
            if time.monotonic() >= stop_at:  # behind schedule at the window's end
                tally.unsent += len(due) - k
                break
            wait = at - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            t0 = time.perf_counter()
            tally.late_ms.append(max(0.0, -wait) * 1000.0)
            status = await exchange(reader, writer, request)
            tally.latencies_ms.append((time.perf_counter() - t0) * 1000.0)
            tally.statuses[status] = tally.statuses.get(status, 0) + 1
    except (OSError, asyncio.IncompleteReadError, ValueError):
        tally.errors += 1


def _pct(values: np.ndarray, q: float) -> float | None:
    return round(float(np.percentile(values, q)), 2) if len(values) else None


def _merge(load: BeaconLoad, parts: list[dict[str, Any]]) -> dict[str, Any]:
    lat = np.concatenate([p["latencies_ms"] for p in parts])
    late = np.concatenate([p["late_ms"] for p in parts])
    statuses: dict[str, int] = {}
    for p in parts:
        for k, v in p["statuses"].items():
            statuses[str(k)] = statuses.get(str(k), 0) + v
    wall = max(p["wall_s"] for p in parts)
    out: dict[str, Any] = {
        "answers": len(lat), "answers_per_s": round(len(lat) / wall, 1) if wall else 0.0,
        "statuses": dict(sorted(statuses.items())),
        "errors": sum(p["errors"] for p in parts),
        "p50_ms": _pct(lat, 50), "p99_ms": _pct(lat, 99),
        "max_ms": round(float(lat.max()), 2) if len(lat) else None,
        "repeats": sum(p["repeats"] for p in parts),
        "client_busy_cores": round(sum(p["cpu_s"] for p in parts) / wall, 3) if wall else None,
        "wall_s": round(wall, 3), "connections": load.connections,
        "client_processes": load.processes,
    }
    if load.rate_per_s is not None:
        out.update(offered_per_s=load.rate_per_s, beacons=load.beacons(),
                   unsent=sum(p["unsent"] for p in parts),
                   late_p50_ms=_pct(late, 50), late_p99_ms=_pct(late, 99))
    return out

