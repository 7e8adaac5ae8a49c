"""The replay's OpenRTB requests and exchange prices (:mod:`adfunnel.sim.replay_openrtb`):
a row mapped by the endpoint's own mapping gives the attributes the main replay's ad
request gives, and prices print as an exchange prints them."""

from __future__ import annotations

import json
from datetime import datetime

from adfunnel.money import MICROS_PER_FEN
from adfunnel.openrtb.mapping import MappingConfig, map_request
from adfunnel.openrtb.request import decode_bid_request
from adfunnel.sim.ipinyou import CHINA, LogRow
from adfunnel.sim.replay_openrtb import bid_request, fen_text, user_agent
from adfunnel.sim.replay_plans import ad_request

ROW = LogRow(timestamp=datetime(2013, 10, 19, 12, tzinfo=CHINA), user="u1",
             useragent="windows_chrome", ip="113.76.1.*", region="216", city="219",
             exchange="2", domain="news.example", slot_id="slot-9", width=728, height=90,
             visibility="1", slot_format="0", slot_price_fen=37, pay_price_fen=80,
             usertags=("10063",), click=False)


def test_a_row_maps_to_the_main_replays_geo_device_slot_and_floor() -> None:
    """Breaks if the request's geo, user agent, size or floor drift from the main
    replay's (tried: ``region`` sent as "CN216" → geo.region "CN-CN216" ≠ "CN-216";
    ``bidfloor`` in fen (37.0) → floor 37,000,000 ≠ 370,000 micros; the raw
    "windows_chrome" as the UA → no ``os``)."""
    req = decode_bid_request(json.dumps(bid_request(ROW, "r1")).encode())
    mapped = map_request(req, MappingConfig(currency="CNY", exchange="2"))
    assert mapped.select is not None and not mapped.first_price
    attrs = mapped.select.user.attributes
    ours = ad_request(ROW)["user"]["attributes"]
    for name in ("geo.country", "geo.region", "geo.city", "os", "browser", "device_type"):
        assert attrs[name] == ours[name], name
    [slot] = mapped.select.slots
    assert (slot.width, slot.height) == (728, 90)
    assert slot.reserve_cpm_micros == ROW.slot_price_fen * MICROS_PER_FEN
    assert mapped.select.placement.id == "slot-9"
    assert mapped.select.user.key == "u1"
    assert mapped.deadline_ms == 100 - 10  # tmax less the default network margin


def test_prices_print_as_an_exchange_prints_them() -> None:
    assert fen_text(80) == "0.800000"
    assert fen_text(294) == "2.940000"
    assert user_agent("other_other") == "other_other"  # unknown pair: as the log has it
    assert "MSIE" in user_agent("windows_ie")
