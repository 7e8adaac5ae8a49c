"""What an ``adfunnel bench events`` run works on: its own PostgreSQL schema and JetStream
stream (made on entry, dropped afterwards), its campaigns (created through the store:
half CPM, half CPC, one ad each, budgets that never bind), and the valid events the
aggregator's stream is pre-filled with (micros; wall-clock Unix seconds).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from urllib.parse import quote

from sqlalchemy import create_engine, make_url, text

from adfunnel.bench.beacon_load import USER_AGENT, Target, client_address
from adfunnel.campaigns.migrate import upgrade
from adfunnel.campaigns.model import BidType, BillableEvent, Objective
from adfunnel.campaigns.sql_store import SqlCampaignStore
from adfunnel.clock import SystemClock
from adfunnel.db import make_engine
from adfunnel.events.log import EventLogError
from adfunnel.events.model import Event, EventType
from adfunnel.runtime.event_plane import last_seq, make_event_log
from adfunnel.settings import Settings

_log = logging.getLogger(__name__)

#: one event in this many of the pre-filled ones is a click (on the impression before it)
CLICK_EVERY = 50
#: the pre-filled events' client addresses are 10.<this>.x.y (the load's use 10.<process>)
PREFILL_ADDRESS_GROUP = 250
#: events per publish of the pre-fill
PREFILL_BATCH = 1_000
#: CPM and CPC bids of the bench campaigns, micros (per mille for CPM)
CPM_MICROS = 2_000_000
CPC_MICROS = 300_000


@contextlib.contextmanager
def run_schema(database_url: str, schema: str) -> Iterator[str]:
    """A fresh schema (dropped afterwards); the URL whose connections use it."""
    admin = create_engine(_psycopg(database_url), isolation_level="AUTOCOMMIT", pool_size=1)
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE SCHEMA "{schema}"'))
        sep = "&" if "?" in database_url else "?"
        try:
            yield f"{database_url}{sep}options={quote(f'-csearch_path={schema}')}"
        finally:
            with admin.connect() as conn:
                conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
    finally:
        admin.dispose()


@contextlib.contextmanager
def run_stream(settings: Settings) -> Iterator[None]:
    """The stream of ``settings``, made on entry (so an unreachable server fails first),
    deleted afterwards (a failure to delete is logged).

    Raises:
        EventLogUnavailable: the server did not answer.
    """
    log = make_event_log(settings, SystemClock())
    try:
        last_seq(log)
    finally:
        log.close()
    try:
        yield
    finally:
        log = make_event_log(settings, SystemClock())
        try:
            log.delete_stream()  # type: ignore[attr-defined]
        except EventLogError as exc:
            _log.warning("stream %s left behind: %s", settings.event_stream, exc)
        finally:
            log.close()


def create_campaigns(url: str, n: int) -> tuple[Target, ...]:
    """Migrate the database at ``url`` and create ``n`` active campaigns (odd ids CPM,
    even CPC, one ad each, daily budgets that never bind) through the store, ten per
    advertiser; what the beacons need of each."""
    engine = make_engine(url)
    try:
        upgrade(engine)
        store = SqlCampaignStore(engine)
        start = (datetime.now(UTC) - timedelta(days=1)).date()
        targets = []
        advertiser = 0
        for i in range(n):
            if i % 10 == 0:
                advertiser = store.create_advertiser(f"bench-{i // 10}").id
            cpm = i % 2 == 0
            bid_type, bid = (BidType.CPM, CPM_MICROS) if cpm else (BidType.CPC, CPC_MICROS)
            c = store.create_campaign(
                advertiser_id=advertiser, name=f"bench-{i}",
                objective=Objective.IMPRESSIONS if cpm else Objective.CLICKS,
                bid_type=bid_type, bid_micros=bid, daily_budget_micros=10**12,
                time_zone="UTC", flight_start=start,
                billable_event=BillableEvent.RENDERED)  # the load fires only /i
            ad = store.create_ad(campaign_id=c.id, landing_url=f"https://example.test/{i}",
                                 creative_ref=f"bench/{i}.png", format="banner",
                                 width=300, height=250)
            targets.append(Target(c.id, ad.id, bid_type.value, bid))
        return tuple(targets)
    finally:
        engine.dispose()


def bench_events(targets: tuple[Target, ...], n: int, prefix: str) -> list[Event]:
    """``n`` valid events as the tracker appends them: impressions over ``targets`` in
    turn, every :data:`CLICK_EVERY`-th a click (a second later) on the impression
    before it, from a browser at a private address (a few impressions per address:
    :func:`~adfunnel.bench.beacon_load.client_address`)."""
    now = time.time()
    out: list[Event] = []
    for i in range(n):
        click = (i + 1) % CLICK_EVERY == 0 and i > 0
        k = i - 1 if click else i
        t = targets[k % len(targets)]
        expected = t.price_micros // 1000 if t.billing_type == "CPM" else t.price_micros
        out.append(Event(
            event_type=EventType.CLICK if click else EventType.IMPRESSION,
            impression_id=f"{prefix}{k}", campaign_id=t.campaign_id, ad_id=t.ad_id,
            placement="bench", price_micros=t.price_micros, billing_type=t.billing_type,
            served_at=int(now) - 5, expected_micros=expected,
            occurred_at=now + (1.0 if click else 0.0),
            client_ip=client_address(PREFILL_ADDRESS_GROUP, k),
            user_agent=USER_AGENT))
    return out


def _psycopg(url: str) -> str:
    """A PostgreSQL URL with the psycopg (3) driver named."""
    if url.startswith("postgresql://"):
        return "postgresql+psycopg://" + url.removeprefix("postgresql://")
    return url


def where(url: str) -> str:
    """``host:port/database`` of a database URL (no credentials)."""
    return make_url(url).render_as_string(hide_password=True).split("@")[-1]
