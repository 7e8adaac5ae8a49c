"""The demo's records: one advertiser, three placements and three campaigns with one
approved, live ad each, so ``/demo`` shows ads within a minute of a fresh start.

- ``demo-top``: a 728x90 image ad (``banner``), "Demo image (top)";
- ``demo-feed``: a native ad in the article's middle, "Demo native (in-feed)";
- ``demo-bottom``: an html ad (300x250, in its sandboxed frame) far below the fold,
  "Demo html (bottom)".

Each campaign targets its own placement only, bids CPM above the placements' reserve and
lands on ``/demo/landing`` of this server. Seeding is idempotent: a restart finds the
records by name and id and only brings their URLs and allowed origins up to the
server's present address (a new port).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from urllib.parse import urlsplit

from adfunnel.campaigns.creative import Creative, HtmlCreative, ImageCreative, NativeCreative
from adfunnel.campaigns.errors import NotFound
from adfunnel.campaigns.store import CampaignStore
from adfunnel.settings import Settings
from adfunnel.targeting.expr import dump_expr

DEMO_ADVERTISER = "Demo advertiser (Northwind Cycles)"
#: The demo campaigns start long ago, so a server on a manual clock serves them too.
FLIGHT_START = date(2024, 1, 1)
BID_CPM_MICROS = 2_000_000  # 2.00 per thousand impressions
RESERVE_CPM_MICROS = 500_000
DAILY_BUDGET_MICROS = 100_000_000
#: What the html ad's script sets in its own frame (a test checks the page has none).
FRAME_GLOBAL = "adfDemoFrame"


@dataclass(frozen=True)
class DemoSlot:
    """A demo placement and the campaign and ad that fill it."""

    placement: str
    placement_name: str
    campaign: str
    format: str
    width: int
    height: int


SLOTS = (
    DemoSlot("demo-top", "Demo top banner", "Demo image (top)", "banner", 728, 90),
    DemoSlot("demo-feed", "Demo in-feed native", "Demo native (in-feed)", "native", 600, 160),
    DemoSlot("demo-bottom", "Demo bottom html", "Demo html (bottom)", "html", 300, 250),
)


def demo_enabled(settings: Settings) -> bool:
    """Whether this server runs the demo: ``settings.demo``, and when unset, only on the
    embedded default store (``database_url`` left at its default)."""
    if settings.demo is not None:
        return settings.demo
    return settings.database_url == Settings.model_fields["database_url"].default


def demo_base_url(settings: Settings) -> str:
    """The server's own address for the demo's absolute URLs: ``public_base_url``, else
    ``http://host:port`` (a wildcard bind address as 127.0.0.1)."""
    if settings.public_base_url:
        return settings.public_base_url.rstrip("/")
    host = settings.host
    if host in ("", "0.0.0.0", "::"):
        host = "127.0.0.1"
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{settings.port}"


def demo_origins(base_url: str) -> tuple[str, ...]:
    """The origins of ``base_url`` a browser may name (127.0.0.1 and localhost are one
    machine, two origins)."""
    parts = urlsplit(base_url)
    origin = f"{parts.scheme}://{parts.netloc}".lower()
    if parts.hostname in ("127.0.0.1", "localhost"):
        port = f":{parts.port}" if parts.port else ""
        return (f"{parts.scheme}://127.0.0.1{port}", f"{parts.scheme}://localhost{port}")
    return (origin,)


def creative_of(slot: DemoSlot, base_url: str) -> Creative:
    """The demo creative of ``slot``, its images served by this server."""
    if slot.format == "banner":
        return ImageCreative(url=f"{base_url}/demo/assets/banner-728x90.png", width=728,
                             height=90, alt="Northwind Cycles: autumn sale, 20 % off city bikes")
    if slot.format == "native":
        return NativeCreative(
            title="Ride through winter: Northwind's all-weather city bike",
            body="Hub gears, dynamo lights and studded tyres as an option. Test-ride one "
                 "this weekend at any Northwind store; fitting is free.",
            sponsor="Northwind Cycles", cta="Book a test ride",
            image_url=f"{base_url}/demo/assets/thumb-160.png")
    return HtmlCreative(markup=(
        '<a id="ad" href="%%CLICK_URL%%" target="_blank" rel="noopener">'
        '<div id="box">Northwind Cycles<br><small>Cargo bikes for the school run</small>'
        '<span id="go">See the range</span></div></a>'
        "<style>#ad{display:block;width:300px;height:250px;text-decoration:none;color:#fff;"
        "background:linear-gradient(135deg,#1d4e89,#2a9d8f);font:600 24px/1.3 system-ui,"
        "sans-serif}#box{padding:48px 24px}small{font-weight:400;font-size:16px}"
        "#go{display:inline-block;margin-top:28px;background:#f4a261;color:#1d2a38;"
        "border-radius:6px;padding:6px 14px;font-size:16px}</style>"
        f"<script>window.{FRAME_GLOBAL}=true;"
        "document.getElementById('go').textContent+=' \\u2192';</script>"))


def seed_demo(store: CampaignStore, base_url: str) -> dict[str, int]:
    """Create (or bring up to date) the demo's records on ``store`` for a server at
    ``base_url``; returns the demo campaigns' ids by placement id."""
    origins = demo_origins(base_url)
    landing = f"{base_url}/demo/landing"
    advertiser = next((a for a in store.list_advertisers() if a.name == DEMO_ADVERTISER),
                      None) or store.create_advertiser(DEMO_ADVERTISER)
    campaigns = {c.name: c for c in store.list_campaigns(advertiser.id,
                                                          include_archived=False)}
    ids: dict[str, int] = {}
    for slot in SLOTS:
        _placement(store, slot, origins)
        campaign = campaigns.get(slot.campaign) or store.create_campaign(
            advertiser_id=advertiser.id, name=slot.campaign, objective="clicks",
            bid_type="CPM", bid_micros=BID_CPM_MICROS,
            daily_budget_micros=DAILY_BUDGET_MICROS, time_zone="UTC",
            flight_start=FLIGHT_START, pacing_mode="accelerated",
            targeting=dump_expr({"attr": "placement", "in": [slot.placement]}))
        ids[slot.placement] = campaign.id
        creative = creative_of(slot, base_url)
        ads = store.list_ads(campaign.id, include_archived=False)
        if not ads:
            store.create_ad(campaign_id=campaign.id, landing_url=landing,
                            creative_ref=f"demo-{slot.placement}", format=slot.format,
                            width=slot.width, height=slot.height, creative=creative)
        elif ads[0].landing_url != landing or ads[0].creative != creative:
            store.update_ad(ads[0].id, {"landing_url": landing, "creative": creative})
    return ids


def _placement(store: CampaignStore, slot: DemoSlot, origins: tuple[str, ...]) -> None:
    try:
        held = store.get_placement(slot.placement)
    except NotFound:
        store.create_placement(id=slot.placement, name=slot.placement_name,
                               reserve_cpm_micros=RESERVE_CPM_MICROS,
                               allowed_sizes=(f"{slot.width}x{slot.height}",),
                               allowed_formats=(slot.format,), allowed_origins=origins)
        return
    if not set(origins) <= set(held.allowed_origins):
        store.update_placement(slot.placement, {
            "allowed_origins": tuple(dict.fromkeys((*held.allowed_origins, *origins)))})
