"""Event plane benchmark (thin entry; the code is adfunnel.bench.events).

python -m benchmarks.events_bench --events 20000 --duration-s 10 --lag-rate 5000 \
    --json out.json

Needs PostgreSQL (--database-url; the run makes and drops a schema of its own) and NATS
JetStream (--event-log; the run's own streams, deleted after). Tracker beacons/s
against a bare 204 route, aggregator events/s, beacon-to-ledger lag p50/p99; see the
module docstring of ``adfunnel.bench.events`` for every figure.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from adfunnel.bench.events import DEFAULT_DATABASE_URL, DEFAULT_NATS_URL, run_events_bench


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--database-url", default=DEFAULT_DATABASE_URL)
    p.add_argument("--event-log", default=DEFAULT_NATS_URL)
    p.add_argument("--campaigns", type=int, default=100)
    p.add_argument("--events", type=int, default=20_000)
    p.add_argument("--aggregator-max-s", type=float, default=60.0)
    p.add_argument("--duration-s", type=float, default=10.0)
    p.add_argument("--connections", type=int, default=64)
    p.add_argument("--client-processes", type=int, default=None)
    p.add_argument("--tokens", type=int, default=50_000)
    p.add_argument("--lag-rate", type=float, default=5_000.0)
    p.add_argument("--lag-duration-s", type=float, default=10.0)
    p.add_argument("--drain-timeout-s", type=float, default=300.0)
    p.add_argument("--tracker-log", default=None, help="write the tracker's output here")
    p.add_argument("--json", default=None, help="write the result here as JSON")
    a = p.parse_args(argv)
    result = run_events_bench(
        database_url=a.database_url, nats_url=a.event_log, campaigns=a.campaigns,
        events=a.events, aggregator_max_s=a.aggregator_max_s, duration_s=a.duration_s,
        connections=a.connections, client_processes=a.client_processes, tokens=a.tokens,
        lag_rate_per_s=a.lag_rate, lag_duration_s=a.lag_duration_s,
        drain_timeout_s=a.drain_timeout_s,
        log_path=Path(a.tracker_log) if a.tracker_log else None)
    text = json.dumps(result, indent=2)
    if a.json:
        with open(a.json, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
