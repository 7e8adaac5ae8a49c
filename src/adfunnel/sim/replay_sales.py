"""The replay report's sales: total revenue, and revenue, fill and eCPM per placement and
per slot size (issue #26, the operator's view).

- ``revenue``: the server's ``currency`` and ``total_micros``, every campaign's billed
  micros over the replay's local days (each advertiser's rollup report, summed);
- ``placements``: per placement the replay sent requests to, the server's placement
  report (``GET /v1/placements/{id}/report`` over HTTP: requests and filled slots it
  counted, billed impressions, revenue, eCPM) beside ``requests_sent`` (the replay's
  count), and ``totals`` summed over them — which add up to the replay's requests,
  filled slots and ``revenue.total_micros`` (checked by tests/sim/test_replay_sales.py);
- ``slot_sizes``: per slot size ``WxH``, requests and filled slots from what the replay
  sent and got back, billed impressions and revenue from the server's rollups per ad
  (each ad fills only slots of its own size), fill rate and eCPM.

Fill rate is per slot (filled / slots requested; one slot per replayed request); eCPM =
revenue × 1000 // impressions, integer micros, null without impressions.

The server's rollups follow its ledger on its own clock (the replay's server refreshes
them every 900 s of it): :func:`sales_report` first moves the server's clock past one
refresh after the last request, so the last quarter-hour's billing is in them. Read it
after every other part of the report that reads the server's today.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import quote

from adfunnel.sim.ipinyou import CHINA
from adfunnel.sim.replayer import Replayer

#: How far past the last request the clock moves so the server's rollups refresh (the
#: replay's ``ADFUNNEL_ROLLUP_REFRESH_S`` and a second).
ROLLUP_CATCH_UP = timedelta(seconds=901)
ZONE = str(CHINA)


def sales_report(replayer: Replayer, first: datetime, last: datetime) -> dict[str, Any]:
    """``revenue``, ``placements`` and ``slot_sizes`` of the replay's local days
    ``first``..``last`` in China's zone (module docstring)."""
    r = replayer.http.put("/v1/admin/clock",
                          json={"now": (last + ROLLUP_CATCH_UP).isoformat()})
    if r.status_code != 200:
        replayer.stats.errors[f"clock_{r.status_code}"] += 1
    span = {"from": first.astimezone(CHINA).date().isoformat(),
            "to": last.astimezone(CHINA).date().isoformat(), "time_zone": ZONE}
    billed_by_ad: dict[int, list[int]] = defaultdict(lambda: [0, 0])
    for adv in replayer.advertiser_ids:
        rep = _get(replayer, f"/v1/advertisers/{adv}/report/rollups",
                   {**span, "group_by": "ad"})
        for row in rep["rows"]:
            cell = billed_by_ad[row["ad_id"]]
            cell[0] += row["impressions"]
            cell[1] += row["billed_micros"]
    total = sum(v[1] for v in billed_by_ad.values())
    placements = []
    currency = None
    for pid, sent in sorted(replayer.placements_sent.items()):
        rep = _get(replayer, f"/v1/placements/{quote(pid, safe='')}/report", span)
        currency = rep["currency"]
        placements.append({"placement": pid, "requests_sent": sent,
                           **{k: rep[k] for k in _FIGURES}})
    placements.sort(key=lambda p: (-p["revenue_micros"], p["placement"]))
    return {
        "revenue": {"currency": currency, "total_micros": total},
        "placements": {"totals": _totals(placements), "rows": placements},
        "slot_sizes": _sizes(replayer, billed_by_ad),
    }


_FIGURES = ("requests", "slots_requested", "filled_slots", "fill_rate", "impressions",
            "revenue_micros", "ecpm_micros")


def _get(replayer: Replayer, path: str, params: dict[str, str]) -> dict[str, Any]:
    r = replayer.http.get(path, params=params)
    if r.status_code != 200:
        raise RuntimeError(f"GET {path} -> {r.status_code}: {r.text}")
    out: dict[str, Any] = r.json()
    return out


def _totals(rows: list[dict[str, Any]]) -> dict[str, Any]:
    sums = {k: sum(p[k] for p in rows) for k in ("requests_sent", "requests",
                                                  "slots_requested", "filled_slots",
                                                  "impressions", "revenue_micros")}
    return {"placements": len(rows), **sums,
            **_rates(sums["slots_requested"], sums["filled_slots"], sums["impressions"],
                     sums["revenue_micros"])}


def _rates(slots: int, filled: int, impressions: int, revenue: int) -> dict[str, Any]:
    return {"fill_rate": round(filled / slots, 4) if slots else None,
            "ecpm_micros": revenue * 1000 // impressions if impressions else None}


def _sizes(replayer: Replayer, billed_by_ad: dict[int, list[int]]) -> list[dict[str, Any]]:
    """Per slot size: what the replay sent and got, and the server's billing of the
    ads of that size (an ad the replay did not make counts under ``unknown``)."""
    billed: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for ad_id, (impressions, micros) in billed_by_ad.items():
        cell = billed[replayer.ad_sizes.get(ad_id, "unknown")]
        cell[0] += impressions
        cell[1] += micros
    out = []
    for size in sorted(set(replayer.sizes) | set(billed)):
        requests, filled = replayer.sizes.get(size, (0, 0))
        impressions, revenue = billed.get(size, (0, 0))
        out.append({"size": size, "requests": requests, "filled_slots": filled,
                    "impressions": impressions, "revenue_micros": revenue,
                    **_rates(requests, filled, impressions, revenue)})
    return out
