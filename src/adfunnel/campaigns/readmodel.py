"""The read model of the campaign side: campaigns, ads and placements by id, newest
version wins.

The tracker needs each ad's landing URL and each placement's house ad (click
redirects); the aggregator needs each campaign's budgets and time zone (billing). This
holds just those records, booted from the store and kept current by the change feed
(:class:`adfunnel.campaigns.change_feed.ChangeFeed`), without the targeting index or the
serving columns. The ad server's :class:`~adfunnel.serving.catalog.Catalog` extends it
with those (it overrides :meth:`CampaignReadModel._put`), so the rules of applying a
record and the lookups live here once.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

from adfunnel.campaigns.model import (
    Ad,
    Advertiser,
    Campaign,
    ChangeRecord,
    ModelRelease,
    Placement,
)
from adfunnel.campaigns.store import CampaignStore


class CampaignReadModel:
    """Campaigns, ads and placements by id, newest version wins; thread-safe reads."""

    def __init__(self) -> None:
        self.campaigns: dict[int, Campaign] = {}
        self.ads: dict[int, Ad] = {}
        self.placements: dict[str, Placement] = {}
        self.position = 0  # last change-log seq applied
        self._lock = threading.Lock()

    @classmethod
    def read(cls, store: CampaignStore) -> CampaignReadModel:
        """Every campaign, ad and placement of ``store`` now."""
        model = cls()
        _, campaigns, ads, last_seq = store.snapshot()
        for rec in (*campaigns, *ads, *store.list_placements()):
            model._put(rec)
        model.position = last_seq
        return model

    def campaign(self, campaign_id: int) -> Campaign | None:
        """The campaign, or None."""
        return self.campaigns.get(campaign_id)

    def landing_url(self, ad_id: int) -> str | None:
        """The ad's landing URL, or None for an unknown or unapproved ad."""
        return landing_url(self.ads, ad_id)

    def house_landing_url(self, placement: str) -> str | None:
        """The landing URL of the placement's house ad, or None."""
        return house_landing_url(self.placements, placement)

    def allowed_origins(self, placement: str) -> tuple[str, ...]:
        """The web origins whose pages may use ``placement`` from a browser (none for
        an unknown placement)."""
        held = self.placements.get(placement)
        return () if held is None else held.allowed_origins

    def any_allowed_origins(self) -> frozenset[str]:
        """The origins some placement allows (a CORS preflight names no placement)."""
        return frozenset(o for p in list(self.placements.values()) for o in p.allowed_origins)

    def apply(self, change: ChangeRecord, *, advance: bool = True) -> bool:
        """Apply one change record; False when it was not newer than what is held."""
        with self._lock:
            if advance:
                self.position = max(self.position, change.seq)
            return self._put(change.record)

    def apply_local(self, change: ChangeRecord) -> bool:
        """Apply a change this process just committed, ahead of the feed."""
        return self.apply(change, advance=False)

    def _put(self, rec: Advertiser | Campaign | Ad | Placement | ModelRelease) -> bool:
        """Hold ``rec`` when it is newer than the held version (called under the lock)."""
        if isinstance(rec, Advertiser | ModelRelease):
            return False  # nothing here needs advertisers or models
        held: dict = (self.campaigns if isinstance(rec, Campaign) else
                      self.placements if isinstance(rec, Placement) else self.ads)
        return keep_newer(held, rec)


def keep_newer(held: dict, rec: Advertiser | Campaign | Ad | Placement | ModelRelease) -> bool:
    """Put ``rec`` into ``held`` (by id) unless a version at least as new is there; True
    when it was put. Duplicate and out-of-order change records are harmless so."""
    old = held.get(rec.id)
    if old is not None and old.version >= rec.version:
        return False
    held[rec.id] = rec
    return True


def landing_url(ads: Mapping[int, Ad], ad_id: int) -> str | None:
    """The landing URL of ``ads[ad_id]``, or None for an unknown ad or one not approved.

    A click's token names the ad, not the URL, and outlives its serve (an expired one
    still lands), so an advertiser's edit of an approved ad's landing URL (which sends
    it back to review) must not turn old tokens into redirects to a URL no reviewer
    has seen, or one a reviewer rejected."""
    ad = ads.get(ad_id)
    if ad is None or not ad.approved:
        return None
    return ad.landing_url


def house_landing_url(placements: Mapping[str, Placement], placement: str) -> str | None:
    """The landing URL of the placement's house ad, or None."""
    p = placements.get(placement)
    return p.house_ad.landing_url if p is not None and p.house_ad is not None else None
