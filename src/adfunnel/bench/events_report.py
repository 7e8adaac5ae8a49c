"""The result of ``adfunnel bench events``: its headline figures against their targets
(events/s, ms, CPU µs per event), with every phase's own figures beside them."""

from __future__ import annotations

from typing import Any

#: tracker beacons/s ÷ the bare 204 route's, at least
TRACKER_TARGET_RATIO = 0.5
#: events/s one aggregator records into PostgreSQL, at least
AGGREGATOR_TARGET_PER_S = 50_000
#: beacon-to-ledger p99 at 5,000 beacons/s offered, ms, at most
LAG_TARGET_P99_MS = 5_000.0


def events_report(*, agg: dict[str, Any], lag: dict[str, Any], baseline: dict[str, Any],
            tracker: dict[str, Any], floors: dict[str, Any], setup: dict[str, Any]
            ) -> dict[str, Any]:
    trk = tracker["statuses"].get("204", 0) / tracker["wall_s"] if tracker["wall_s"] else 0.0
    base = (baseline["statuses"].get("204", 0) / baseline["wall_s"]
            if baseline["wall_s"] else 0.0)
    ratio = trk / base if base else None
    p99 = lag["lag_p99_ms"]
    return {
        "tracker_beacons_per_s": round(trk, 1),
        "baseline_204_per_s": round(base, 1),
        "tracker_ratio": round(ratio, 3) if ratio is not None else None,
        "tracker_target_ratio": TRACKER_TARGET_RATIO,
        "tracker_meets_target": ratio is not None and ratio >= TRACKER_TARGET_RATIO,
        "aggregator_events_per_s": agg["events_per_s"],
        "aggregator_target_per_s": AGGREGATOR_TARGET_PER_S,
        "aggregator_meets_target": agg["events_per_s"] >= AGGREGATOR_TARGET_PER_S,
        "lag_p50_ms": lag["lag_p50_ms"],
        "lag_p99_ms": p99,
        "lag_offered_per_s": lag["offered_per_s"],
        "lag_achieved_per_s": lag["answers_per_s"],
        "lag_target_p99_ms": LAG_TARGET_P99_MS,
        "lag_meets_target": p99 is not None and p99 <= LAG_TARGET_P99_MS and lag["drained"],
        # CPU per event: what each costs beside what nats-py alone costs
        "tracker_cpu_us_per_beacon": _per(tracker["server_busy_cores"], tracker["wall_s"],
                                          tracker["statuses"].get("204", 0)),
        "baseline_cpu_us_per_request": _per(baseline["server_busy_cores"],
                                            baseline["wall_s"],
                                            baseline["statuses"].get("204", 0)),
        # from the CPU seconds themselves: busy_cores is rounded for reading, and a tiny
        # run on a loaded machine rounds it to 0
        "aggregator_cpu_us_per_event": (round(agg["cpu_s"] / agg["recorded"] * 1e6, 1)
                                        if agg["recorded"] else None),
        "nats_publish_cpu_us": floors["publish"]["cpu_us_per_event"],
        "nats_receive_cpu_us": floors["receive"]["cpu_us_per_event"],
        "tracker": tracker, "baseline": baseline, "aggregator": agg, "lag": lag,
        "floors": floors, "setup": setup,
    }


def _per(busy_cores: float | None, wall_s: float, n: int) -> float | None:
    """CPU microseconds per item from busy cores over ``wall_s`` (None: not measured)."""
    if busy_cores is None or not n or not wall_s:
        return None
    return round(busy_cores * wall_s / n * 1e6, 1)

