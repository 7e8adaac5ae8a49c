"""``adfunnel bench openrtb``: the request pairs ask both routes for the same ad, and a
tiny real run measures both routes, both filling (speed itself is never asserted)."""

from __future__ import annotations

import pytest

from adfunnel.bench.http_workload import _workload
from adfunnel.bench.openrtb import (
    FLOOR_CPM,
    iso_regions,
    request_pair,
    run_openrtb_bench,
)
from adfunnel.openrtb.request import decode_bid_request
from adfunnel.serving.request import decode_request
from adfunnel.targeting.expr import All, Any_, In, NotIn


def test_each_pair_asks_both_routes_for_the_row_and_the_same_ad() -> None:
    """Breaks if the bid request loses what the row asks for (tried: the user agents of
    ``("windows", "ie")`` and ``("windows", "chrome")`` swapped: the mapped browser is
    not the row's; the row's slot size listed second in ``format[]``: the slot is
    320x50), or if the select body is not a valid ad request equal to the mapping's."""
    _, reqs, _ = _workload(10, seed=1)
    for n, row in enumerate(reqs[:300]):
        select_body, ortb_body = request_pair(row, n)
        select = decode_request(select_body)
        ortb = decode_bid_request(ortb_body)
        [slot] = select.slots
        w, h = min(row["slot_size"]).split("x")
        assert (slot.width, slot.height) == (int(w), int(h))
        assert slot.reserve_cpm_micros == round(FLOOR_CPM * 1_000_000)
        attrs = select.user.attributes
        assert attrs["geo.city"] == min(row["geo.city"])
        assert attrs["geo.region"] == f"CN-{min(row['geo.region'])}"
        if min(row["os"]) == "windows" and min(row["browser"]) in ("ie", "chrome"):
            assert attrs["browser"] == min(row["browser"]), n
        # site.cat reaches interests on both routes (the mapping reads categories)
        assert list(attrs["interests"]) == ["IAB12"] and "audiences" not in attrs
        assert select.user.key == ortb.user.id == f"u{n % 997}"
        assert select.placement.domain == ortb.site.domain == min(row["domain"])
        assert select.deadline_ms == 100 and ortb.tmax == 110
        assert ortb.source.schain is not None and ortb.imp[0].secure == 1


def test_iso_regions_rewrites_only_region_values() -> None:
    """Breaks if a region inside ``Any_`` is left bare (tried: no recursion into
    ``Any_``), or another attribute is touched."""
    expr = All((In("geo.region", frozenset({"216", "CN-1"})), NotIn("os", frozenset({"mac"})),
                Any_((In("geo.region", frozenset({"3"})), In("interests", frozenset({"7"}))))))
    assert iso_regions(expr) == All((
        In("geo.region", frozenset({"CN-216", "CN-1"})), NotIn("os", frozenset({"mac"})),
        Any_((In("geo.region", frozenset({"CN-3"})), In("interests", frozenset({"7"}))))))


@pytest.mark.e2e
def test_a_tiny_run_measures_both_routes_and_both_fill() -> None:
    """A real server, 200 ads, one short window per route. Breaks if the OpenRTB bids
    have nothing to render (tried: the catalogue's creative back to ``bench/1.png``:
    OpenRTB ``fill_rate`` 0, every answer a 204 no_fill) or a route is sent the other's
    bodies (tried: ``/openrtb2/bid`` driven with the select bodies: every answer a 400, no
    decision, ``per_core_ratio`` None), or the paired check compares unlike rows (tried:
    the OpenRTB bodies shifted by one in :func:`same_answers`' zip: agreement ~0.8)."""
    r = run_openrtb_bench(ads=200, concurrency=2, duration_s=1.0, rounds=1, warmup_s=0.3)
    for key in ("ads", "workers", "concurrency", "duration_s_per_route", "rounds",
                "rate_ratio", "per_core_ratio", "targets", "loadavg_before", "setup_s"):
        assert r[key] is not None, key
    assert set(r["targets"]) == {"rate_ratio_min", "p99_ms_max", "rate_met", "p99_met"}
    for route in ("select", "openrtb"):
        side = r[route]
        for key in ("decisions_per_s", "per_core", "busy_cores", "p50_ms", "p99_ms",
                    "fill_rate", "load_generator_busy_cores"):
            assert side[key] is not None and side[key] > 0, (route, key)
        assert side["errors"] == 0 and side["outcomes"].get("200", 0) > 0, route
        assert len(side["p99_ms_windows"]) == 1
    assert r["openrtb"]["request_bytes"] > r["select"]["request_bytes"]
    # the same asks fill alike (each side's window sees a different share of the rows)
    assert abs(r["openrtb"]["fill_rate"] - r["select"]["fill_rate"]) < 0.15
    # and, sent one by one, the same rows with the same ads
    assert r["paired_requests"] == 200 and r["paired_fill_agreement"] >= 0.95
    assert r["paired_same_ad"] >= 0.9
