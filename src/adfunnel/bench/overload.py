"""Overload benchmark: many concurrent keep-alive clients against one ``adfunnel serve``.

Starts a real server process (temporary SQLite file, system clock, ``budget=local``),
creates a few campaigns through the advertiser API, measures a baseline at concurrency
1, then holds
``clients`` requests in flight for ``duration_s`` seconds (closed loop: each client sends
its next request when the previous answer arrives). Latency is client-side, from the
request's first byte written to the answer's last byte read.

The load generator writes pre-encoded HTTP/1.1 requests on raw asyncio streams: it shares
the machine with the server, and a full HTTP client library costs more CPU per request
than the server's own answer, which would measure the client instead.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import uvloop

from adfunnel.sim.server_proc import ServerProcess, auth_headers

COUNTRIES = ("US", "CA", "DE", "FR")


@dataclass
class Tally:
    """What the clients saw: latency in ms per answer, and answers by status."""

    latencies_ms: list[float] = field(default_factory=list)
    statuses: dict[int, int] = field(default_factory=dict)
    #: answers by ``"STATUS"`` or ``"STATUS:OUTCOME"`` (the ``x-adfunnel-outcome`` header)
    outcomes: dict[str, int] = field(default_factory=dict)
    errors: int = 0

    def add(self, status: int, ms: float, outcome: str | None = None) -> None:
        self.latencies_ms.append(ms)
        self.statuses[status] = self.statuses.get(status, 0) + 1
        key = f"{status}:{outcome}" if outcome else str(status)
        self.outcomes[key] = self.outcomes.get(key, 0) + 1

    def summary(self) -> dict[str, Any]:
        lat = np.array(self.latencies_ms) if self.latencies_ms else np.zeros(1)
        return {"answers": len(self.latencies_ms), "errors": self.errors,
                "statuses": {str(k): v for k, v in sorted(self.statuses.items())},
                "p50_ms": round(float(np.percentile(lat, 50)), 2),
                "p99_ms": round(float(np.percentile(lat, 99)), 2),
                "max_ms": round(float(lat.max()), 2)}


def select_request(host: str, n: int, deadline_ms: int) -> bytes:
    """One pre-encoded ``POST /v1/ads:select`` (HTTP/1.1, keep-alive)."""
    return encode_request(host, "POST", "/v1/ads:select", select_body(n, deadline_ms))


def select_body(n: int, deadline_ms: int) -> bytes:
    """The JSON body of the ``n``-th ad request of this benchmark."""
    return json.dumps({
        "user": {"key": f"u{n % 997}",
                 "attributes": {"geo.country": COUNTRIES[n % len(COUNTRIES)]}},
        "placement": {"id": "feed", "reserve_cpm_micros": 100_000},
        "slots": [{"id": "s1", "position": 1, "width": 300, "height": 250}],
        "deadline_ms": deadline_ms,
    }).encode()


def encode_request(host: str, method: str, path: str, body: bytes | None = None) -> bytes:
    """One pre-encoded HTTP/1.1 keep-alive request (JSON ``body``, if any)."""
    if body is None:
        return f"{method} {path} HTTP/1.1\r\nhost: {host}\r\n\r\n".encode()
    head = (f"{method} {path} HTTP/1.1\r\nhost: {host}\r\n"
            f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n")
    return head.encode() + body


#: Response header naming why a select answered 204 (``no_fill``, ``shed``, ``late``).
OUTCOME_HEADER = b"x-adfunnel-outcome"


async def _exchange(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    request: bytes) -> tuple[int, str | None]:
    """Send one request, read its whole answer; the HTTP status and the outcome header."""
    writer.write(request)
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    status = int(lines[0].split(b" ", 2)[1])
    length = 0
    outcome = None
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"content-length":
            length = int(value)
        elif name == OUTCOME_HEADER:
            outcome = value.strip().decode()
    if length:
        await reader.readexactly(length)
    return status, outcome


async def _client(host: str, port: int, requests: list[bytes], window: dict[str, float],
                  ready: asyncio.Semaphore, start: asyncio.Event, tally: Tally,
                  limit: int | None) -> None:
    writer = None
    try:
        reader, writer = await asyncio.open_connection(host, port)
        await _exchange(reader, writer, requests[-1])  # warm-up: the server has accepted us
    except (OSError, asyncio.IncompleteReadError, ValueError):
        tally.errors += 1
        reader = None
    finally:
        ready.release()
    await start.wait()
    sent = 0
    try:
        while (reader is not None and time.monotonic() < window["stop_at"]
               and (limit is None or sent < limit)):
            t0 = time.perf_counter()
            status, outcome = await _exchange(reader, writer, requests[sent % len(requests)])
            tally.add(status, (time.perf_counter() - t0) * 1000.0, outcome)
            sent += 1
    except (OSError, asyncio.IncompleteReadError, ValueError):
        tally.errors += 1
    finally:
        if writer is not None:
            writer.close()


async def drive(url: str, clients: int, duration_s: float, deadline_ms: int,
                limit_per_client: int | None = None) -> Tally:
    """``clients`` keep-alive connections in a closed loop for ``duration_s`` seconds
    (or ``limit_per_client`` requests each). Connections open before the clock starts."""
    host = url.removeprefix("http://").split(":")[0]
    requests = [select_request(host, n, deadline_ms) for n in range(64)]
    return await drive_requests(url, clients, duration_s, requests, limit_per_client)


async def drive_requests(url: str, clients: int, duration_s: float, requests: list[bytes],
                         limit_per_client: int | None = None) -> Tally:
    """:func:`drive` with the given pre-encoded requests (:func:`encode_request`): client
    ``i`` sends them in turn starting at ``i`` modulo their number."""
    host, port = url.removeprefix("http://").split(":")
    tally = Tally()
    start = asyncio.Event()
    ready = asyncio.Semaphore(0)
    window = {"stop_at": float("inf")}
    k = len(requests)
    tasks = [asyncio.create_task(_client(host, int(port), requests[i % k:] + requests[:i % k],
                                         window, ready, start, tally, limit_per_client))
             for i in range(clients)]
    for _ in range(clients):  # every connection answered once before the clock starts
        await ready.acquire()
    window["stop_at"] = time.monotonic() + duration_s
    start.set()
    await asyncio.gather(*tasks)
    return tally


def create_campaigns(url: str, n: int, api_key: str | None = None) -> None:
    """``n`` broad CPM campaigns (one 300x250 ad each) through the advertiser API, with
    the admin key ``api_key``."""
    with httpx.Client(base_url=url, timeout=30.0, headers=auth_headers(api_key)) as http:
        for k in range(n):
            adv = _post(http, "/v1/advertisers", {"name": f"overload-{k}"})
            c = _post(http, "/v1/campaigns", {
                "advertiser_id": adv["id"], "name": f"overload-{k}", "objective": "impressions",
                "bid_type": "CPM", "bid_micros": 1_000_000 + 100_000 * k,
                "daily_budget_micros": 10**12, "time_zone": "UTC", "flight_start": "2020-01-01",
                "billable_event": "rendered",  # the load fires only /i
            })
            _post(http, f"/v1/campaigns/{c['id']}/ads", {
                "landing_url": "https://example.test/", "creative_ref": f"overload/{k}.png",
                "format": "banner", "width": 300, "height": 250,
            })


def _post(http: httpx.Client, path: str, body: dict[str, Any]) -> dict[str, Any]:
    r = http.post(path, json=body)
    if r.status_code >= 400:
        raise RuntimeError(f"POST {path} -> {r.status_code}: {r.text}")
    return dict(r.json())


def _serving_stats(url: str, api_key: str | None = None) -> dict[str, Any]:
    return dict(httpx.get(url + "/v1/serving/stats", timeout=30.0,
                          headers=auth_headers(api_key)).json())


_WRK_UNITS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60_000.0}


def drive_wrk(url: str, clients: int, duration_s: float, deadline_ms: int) -> dict[str, Any]:
    """The same closed-loop load from ``wrk`` (C, one thread, ``clients`` keep-alive
    connections), so the load generator's own cost is small next to the server's.

    Returns ``answers``, ``answers_per_s``, ``p50_ms``, ``p99_ms``, ``errors`` (socket
    errors and timeouts), as wrk measured them.

    Raises:
        RuntimeError: when ``wrk`` is not installed (Debian package ``wrk``) or fails.
    """
    return run_wrk(url + "/v1/ads:select", clients, duration_s, [select_body(0, deadline_ms)])


def run_wrk(url: str, clients: int, duration_s: float, bodies: list[bytes] | None = None,
            *, count: bool = False) -> dict[str, Any]:
    """``wrk`` (one thread, ``clients`` keep-alive connections) for ``duration_s`` seconds
    against ``url``: ``POST`` of ``bodies`` in turn (JSON), or ``GET`` without any.

    Returns :func:`parse_wrk`'s figures; with ``count`` also ``outcomes`` (answers by
    ``"STATUS"`` or ``"STATUS:OUTCOME"``, counted by a Lua ``response`` callback, which
    costs wrk a little per answer).

    Raises:
        RuntimeError: when ``wrk`` is not installed (Debian package ``wrk``) or fails.
    """
    exe = shutil.which("wrk")
    if exe is None:
        raise RuntimeError("wrk is not installed (apt-get install wrk)")
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
        f.write(wrk_script(bodies or [], count=count))
        script = f.name
    try:
        out = subprocess.run(
            [exe, "-t1", f"-c{clients}", f"-d{max(1, round(duration_s))}s", "--latency",
             "--timeout", "10s", "-s", script, url],
            capture_output=True, text=True, timeout=duration_s + 60, check=False)
    finally:
        Path(script).unlink(missing_ok=True)
    if out.returncode != 0:
        raise RuntimeError(f"wrk failed: {out.stderr.strip()}")
    figures = parse_wrk(out.stdout)
    if count:
        figures["outcomes"] = parse_wrk_outcomes(out.stdout)
    return figures


def wrk_script(bodies: list[bytes], *, count: bool) -> str:
    """The Lua script of :func:`run_wrk`: pre-formatted requests sent in turn, and with
    ``count`` a per-status (and ``x-adfunnel-outcome``) tally printed by ``done``."""
    lines = []
    if bodies:
        quoted = ",\n".join(_lua_long_string(b.decode()) for b in bodies)
        lines += [
            f"local bodies = {{\n{quoted}\n}}",
            "local reqs, n = {}, 0",
            "init = function(args)",
            '  for i, b in ipairs(bodies) do reqs[i] = wrk.format("POST", nil,'
            ' {["Content-Type"] = "application/json"}, b) end',
            "end",
            "request = function() n = n % #reqs + 1; return reqs[n] end",
        ]
    if count:
        lines += [
            "counts = {}",
            "local threads = {}",
            "setup = function(thread) table.insert(threads, thread) end",
            "response = function(status, headers, body)",
            '  local o = headers["x-adfunnel-outcome"]',
            '  local key = o and (status .. ":" .. o) or tostring(status)',
            "  counts[key] = (counts[key] or 0) + 1",
            "end",
            "done = function(summary, latency, requests)",
            "  for _, t in ipairs(threads) do",
            '    for k, v in pairs(t:get("counts")) do',
            '      print("adfunnel-count " .. k .. " " .. v)',
            "    end",
            "  end",
            "end",
        ]
    return "\n".join(lines) + "\n"


def _lua_long_string(text: str) -> str:
    """``text`` as a Lua long-bracket literal (no escapes inside)."""
    level = 0
    while f"]{'=' * level}]" in text:
        level += 1
    eq = "=" * level
    return f"[{eq}[{text}]{eq}]"


def parse_wrk_outcomes(text: str) -> dict[str, int]:
    """The ``adfunnel-count KEY N`` lines printed by :func:`wrk_script`'s ``done``."""
    out: dict[str, int] = {}
    for key, n in re.findall(r"^adfunnel-count (\S+) (\d+)$", text, re.M):
        out[key] = out.get(key, 0) + int(n)
    return out


def parse_wrk(text: str) -> dict[str, Any]:
    """The figures of ``wrk --latency`` output (latencies in ms)."""
    pct = {m.group(1): float(m.group(2)) * _WRK_UNITS[m.group(3)]
           for m in re.finditer(r"^\s+(50|99)(?:\.0+)?%\s+([\d.]+)(us|ms|s|m)\b", text, re.M)}
    answers = re.search(r"^\s*(\d+) requests in", text, re.M)
    rate = re.search(r"^Requests/sec:\s+([\d.]+)", text, re.M)
    errors = sum(int(n) for n in re.findall(r"(?:connect|read|write|timeout) (\d+)", text))
    if answers is None or rate is None or "50" not in pct or "99" not in pct:
        raise RuntimeError(f"unreadable wrk output: {text!r:.300}")
    return {"answers": int(answers.group(1)), "answers_per_s": float(rate.group(1)),
            "p50_ms": round(pct["50"], 2), "p99_ms": round(pct["99"], 2), "errors": errors}


def run_overload(clients: int = 1000, duration_s: float = 5.0, deadline_ms: int = 100,
                 campaigns: int = 5, baseline_requests: int = 300,
                 database_url: str | None = None, load: str = "python") -> dict[str, Any]:
    """Baseline (one client) then ``clients`` concurrent clients against one real server.

    ``load`` is the overload phase's generator: ``python`` (the asyncio client here,
    a separate process from the server) or ``wrk`` (:func:`drive_wrk`).

    Returns the JSON report: client-side p50/p99 (ms) of both phases, the overload
    phase's shed, late and filled shares (of the server's ad requests in that phase),
    throughput, and p99 / deadline (target: <= 2).
    """
    with tempfile.TemporaryDirectory() as tmp:
        url = database_url or f"sqlite:///{Path(tmp) / 'overload.sqlite3'}"
        # budget "local": every decision may fill from the first request on, so the
        # figures measure serving, not a budget service's warm-up
        with ServerProcess(url, clock="system", extra_env={"ADFUNNEL_BUDGET": "local"}
                           ) as server:
            create_campaigns(server.url, campaigns, server.admin_key)
            base = uvloop.run(drive(server.url, 1, 3600.0, deadline_ms, baseline_requests))
            before = _serving_stats(server.url, server.admin_key)
            t0 = time.monotonic()
            if load == "wrk":
                figures = drive_wrk(server.url, clients, duration_s, deadline_ms)
            else:
                tally = uvloop.run(drive(server.url, clients, duration_s, deadline_ms))
                wall = time.monotonic() - t0
                figures = {**tally.summary(),
                           "answers_per_s": round(len(tally.latencies_ms) / wall, 1)}
            after = _serving_stats(server.url, server.admin_key)
    delta = {k: after[k] - before[k] for k in ("decisions", "late", "shed", "filled_slots")}
    seen = max(delta["decisions"], 1)
    overload = figures
    return {
        "deadline_ms": deadline_ms, "clients": clients, "duration_s": duration_s,
        "campaigns": campaigns, "budget": "local", "load_generator": load,
        "baseline": {"clients": 1, **base.summary()},
        "overload": {**overload, "server": delta},
        "shed_share": round(delta["shed"] / seen, 4),
        "late_share": round(delta["late"] / seen, 4),
        "filled_share": round(delta["filled_slots"] / seen, 4),
        "p99_over_deadline": round(overload["p99_ms"] / deadline_ms, 3),
        "p99_over_baseline_p99": round(overload["p99_ms"] / max(base.summary()["p99_ms"], 1e-3),
                                       1),
    }
