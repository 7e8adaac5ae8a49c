"""OpenRTB end to end: a real ``adfunnel serve`` process on a real PostgreSQL, called as
an exchange calls it (``POST /openrtb2/bid`` with an exchange key, then the notice URLs
of its bids with the macros substituted), checked in the ledger table.

- a bid answered for an iPinYou row mapped to a ``BidRequest`` (the replay's mapping,
  :func:`adfunnel.sim.replay_openrtb.bid_request`);
- a won bid's billing notice bills the clearing price once (its impression row charges
  the price per mille exactly); the same billing notice again bills nothing;
- a billing notice above our bid is refused (400 naming ``p``) and bills nothing;
- a loss notice releases the bid's reservation (its ledger row settles the bid's
  expected cost) and bills nothing;
- a short ``replay --openrtb`` span on PostgreSQL: bids, wins, losses, and its forged,
  late and above-the-bid notices each refused by the server.

Skipped when PostgreSQL is down (failed with ``ADFUNNEL_REQUIRE_SERVICES=1``).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine, text

from adfunnel.sim import replay_openrtb
from adfunnel.sim.ipinyou import CHINA, LogRow, load_rows
from adfunnel.sim.replay import run_replay
from adfunnel.sim.replay_openrtb import EXCHANGE_KEYS, bid_request
from adfunnel.sim.server_proc import ServerProcess

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]

BID_MICROS = 5_000_000  # our CPM bid: 5 CNY
NOW = datetime(2013, 10, 19, 12, 0, tzinfo=CHINA)
ROW = LogRow(timestamp=NOW, user="u-e2e", useragent="windows_chrome", ip="113.76.1.*",
             region="216", city="219", exchange="1", domain="news.example", slot_id="slot-1",
             width=300, height=250, visibility="1", slot_format="0", slot_price_fen=5,
             pay_price_fen=120, usertags=(), click=False)


@pytest.fixture
def server(pg_schema_url: str, tmp_path: Path) -> Iterator[tuple[ServerProcess, str]]:
    env = {"ADFUNNEL_CURRENCY": "CNY", "ADFUNNEL_TOKEN_SECRET": secrets.token_hex(32),
           "ADFUNNEL_OPENRTB_EXCHANGE_KEYS": json.dumps(EXCHANGE_KEYS)}
    with ServerProcess(pg_schema_url, clock="manual", extra_env=env,
                       log_path=tmp_path / "server.log", timeout_s=120) as proc:
        yield proc, pg_schema_url


def _campaign(http: httpx.Client) -> int:
    adv = http.post("/v1/advertisers", json={"name": "e2e"}).json()
    campaign = http.post("/v1/campaigns", json={
        "advertiser_id": adv["id"], "name": "rtb-e2e", "objective": "impressions",
        "bid_type": "CPM", "bid_micros": BID_MICROS, "daily_budget_micros": 100_000_000,
        "time_zone": "Asia/Shanghai", "flight_start": "2013-10-19"}).json()
    ad = http.post(f"/v1/campaigns/{campaign['id']}/ads", json={
        "landing_url": "https://adv.example/landing", "format": "banner",
        "creative_ref": "https://creatives.example/a.png", "width": 300, "height": 250})
    assert ad.status_code < 300, ad.text
    return int(campaign["id"])


def _bid(http: httpx.Client, n: int) -> dict[str, Any]:
    r = http.post("/openrtb2/bid", json=bid_request(ROW, f"e2e-{n}"),
                  headers={"x-openrtb-key": EXCHANGE_KEYS["1"]})
    assert r.status_code == 200, r.text
    [seat] = r.json()["seatbid"]
    [bid] = seat["bid"]
    return bid


def _rows(url: str, impression_id: str) -> list[dict[str, Any]]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(text(
                "select event_type, charge_millimicros, billed_micros, settles_micros, "
                "notice_micros, loss_reason from ledger where impression_id = :i"),
                {"i": impression_id})]
    finally:
        engine.dispose()


def test_notices_bill_once_at_the_clearing_price_refuse_above_the_bid_and_release(
        server: tuple[ServerProcess, str]) -> None:
    """Breaks if the billing notice bills the bid instead of the clearing price (tried:
    ``price_micros=None`` in ``NoticeDesk.bill``'s event → charge 5,000,000 ≠ 1,234,567),
    if ``within_bid`` lets a price above the bid through (tried: the ``micros >
    bid_micros`` check removed → the above-the-bid notice answered 204 and billed), or if
    a loss settles nothing (tried: ``expected_micros`` 0 for a loss in
    ``ledger_event`` → settles 0)."""
    proc, url = server
    with httpx.Client(base_url=proc.url, headers=proc.headers, timeout=30) as http:
        http.put("/v1/admin/clock", json={"now": NOW.isoformat()}).raise_for_status()
        _campaign(http)
        won, above, lost = _bid(http, 1), _bid(http, 2), _bid(http, 3)
        assert won["price"] == BID_MICROS / 1_000_000  # second price: our whole value
        clearing = "1.234567"
        assert http.get(won["nurl"].replace("${AUCTION_PRICE}", clearing)).status_code == 204
        burl = won["burl"].replace("${AUCTION_PRICE}", clearing)
        assert http.get(burl).status_code == 204
        assert http.get(burl).status_code == 204  # a replay: taken, billed nothing again
        r = http.get(above["burl"].replace("${AUCTION_PRICE}", "5.000001"))
        assert r.status_code == 400 and "p" in r.text and "above_bid" in r.text
        lurl = lost["lurl"].replace("${AUCTION_LOSS}", "102").replace(
            "${AUCTION_MIN_TO_WIN}", "6.000000")
        assert http.get(lurl).status_code == 204
        stats = http.get("/v1/ledger/stats").json()  # settles the events first
    assert stats["tracker"].get("notice_bill_refused_above_bid") == 1
    billed = [r for r in _rows(url, won["id"]) if r["event_type"] == "impression"]
    assert len(billed) == 1
    assert billed[0]["charge_millimicros"] == 1_234_567  # the clearing price per mille
    assert billed[0]["billed_micros"] == 1_234  # one impression of it, rounded down
    assert _rows(url, above["id"]) == []
    [loss] = _rows(url, lost["id"])
    assert loss["event_type"] == "loss" and loss["billed_micros"] == 0
    assert loss["settles_micros"] == BID_MICROS // 1000  # the bid's reservation released
    assert (loss["loss_reason"], loss["notice_micros"]) == (102, 6_000_000)


def test_a_short_openrtb_replay_on_postgresql(pg_schema_url: str, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Breaks if the replay's bad notices are not what the server refuses (tried: the
    forged notice sent with the real token → the server's ``refused_by_server`` 0 ≠
    ``sent``; the held billing notice sent at the next row, before its token expired →
    refused 0 ≠ sent, and it bills)."""
    monkeypatch.setattr(replay_openrtb, "CHECK_EVERY", 10)  # bad notices in a short span
    rows = load_rows(120)
    report = run_replay(rows, database_url=pg_schema_url, workdir=tmp_path, openrtb=True)
    rtb = report["openrtb"]
    # the server's own counts first: the replayer's (errors) would see it too
    for kind, n in rtb["bad_notices"].items():
        assert n["sent"] >= 1 and n["refused_by_server"] == n["sent"], kind
    assert rtb["requests"] == 120 and rtb["bids"] > 0
    assert rtb["wins"] >= 10 and rtb["losses"] > 0
    assert rtb["notices_server"]["bill_appended"] == rtb["billed_impressions"]
    assert rtb["clearing"]["above_bid"] == 0
    assert 0 < rtb["clearing"]["mean_ratio_to_bid"] <= 1
    m = rtb["money_checks"]
    assert m == {"above_budget_days": [], "billed_twice": 0, "late_billed": 0}
    assert rtb["spend_micros"] == sum(c["billed_micros"] for c in report["campaigns"])
    assert report["errors"] == {}
