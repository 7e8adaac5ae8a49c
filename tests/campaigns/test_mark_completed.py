"""The app's status marks from billing (adfunnel.runtime.embedded.mark_completed): a
spent lifetime completes an active or paused campaign; a refund reopens only a
completed one."""

from __future__ import annotations

from datetime import date

from adfunnel.campaigns.model import CampaignStatus
from adfunnel.campaigns.sql_store import SqlCampaignStore
from adfunnel.runtime.embedded import mark_completed


def _campaign(store: SqlCampaignStore) -> int:
    adv = store.create_advertiser("Acme")
    return store.create_campaign(
        advertiser_id=adv.id, name="c", objective="clicks", bid_type="CPC",
        bid_micros=400_000, daily_budget_micros=10_000_000, time_zone="UTC",
        flight_start=date(2026, 7, 1), lifetime_budget_micros=800_000).id


def test_a_refund_reopens_a_completed_campaign_and_nothing_else(
        store: SqlCampaignStore) -> None:
    cid = _campaign(store)
    mark_completed(store, cid, reopen=True)  # active: untouched
    assert store.get_campaign(cid).status is CampaignStatus.ACTIVE
    mark_completed(store, cid)
    assert store.get_campaign(cid).status is CampaignStatus.COMPLETED
    mark_completed(store, cid, reopen=True)
    assert store.get_campaign(cid).status is CampaignStatus.ACTIVE
    store.update_campaign(cid, {"status": CampaignStatus.PAUSED})
    mark_completed(store, cid, reopen=True)  # paused by its owner: stays paused
    assert store.get_campaign(cid).status is CampaignStatus.PAUSED


def test_a_refund_reopens_a_paused_line_paused(store: SqlCampaignStore) -> None:
    """A line its owner paused, completed by beacons still in flight, goes back to
    ``paused`` when a refund reopens it, whatever was edited while it was completed.
    Breaks if a reopen always sets ``active`` (tried: the paused line served and billed
    again)."""
    cid = _campaign(store)
    store.update_campaign(cid, {"status": CampaignStatus.PAUSED})
    mark_completed(store, cid)
    assert store.get_campaign(cid).status is CampaignStatus.COMPLETED
    store.update_campaign(cid, {"name": "renamed while completed"})
    mark_completed(store, cid, reopen=True)
    assert store.get_campaign(cid).status is CampaignStatus.PAUSED
    store.update_campaign(cid, {"status": CampaignStatus.ACTIVE})  # resumed, completed again
    mark_completed(store, cid)
    mark_completed(store, cid, reopen=True)
    assert store.get_campaign(cid).status is CampaignStatus.ACTIVE
