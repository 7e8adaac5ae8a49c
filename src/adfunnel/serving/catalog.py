"""The ad server's in-memory view of campaigns, ads and placements, kept current from the
change log.

A record is applied only when its version is newer than the one held, so duplicate
and out-of-order change records are harmless. Each approved ad is indexed under
its campaign's targeting, with a static score that includes its quality; status,
schedule and budget are checked later by the funnel so that rejections carry a reason.
Placements (reserves, allowed sizes and formats, house ad) are held by id. The records
themselves, the lookups and the newest-version rule are the campaigns room's read model
(:class:`~adfunnel.campaigns.readmodel.CampaignReadModel`), which :class:`Catalog` extends.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from adfunnel.campaigns.model import (
    MODEL_TARGETS,
    Ad,
    Advertiser,
    BidType,
    Campaign,
    ChangeRecord,
    ModelRelease,
    Placement,
    Priority,
)
from adfunnel.campaigns.readmodel import CampaignReadModel, keep_newer
from adfunnel.campaigns.sql_store import SqlCampaignStore
from adfunnel.index.base import AdIndex
from adfunnel.index.conjunction import ConjunctionIndex
from adfunnel.index.shaped import ShapedIndex
from adfunnel.money import MILLE
from adfunnel.serving.bid_shading import AutomaticBook
from adfunnel.serving.blocks import BlockBook
from adfunnel.serving.caps import CapBook
from adfunnel.serving.columns import CatalogColumns
from adfunnel.serving.direct_book import DirectBook
from adfunnel.targeting.expr import All, Expr, parse_expr

#: Matches every request (an empty conjunction).
EVERYONE: Expr = All(())
#: Added to a sponsorship's or guaranteed line's static score: retrieval runs best score
#: first and stops (``first_limit``, ``retrieval_limit``), and a direct line's tier is
#: served before the auction whatever its contract rate. Above any auction ad's score: a
#: bid's value per impression is at most the bid, itself at most ``max_bid_micros`` ≤
#: 2**53 (the settings' bound), plus a quality of at most 10**9 micros; float64 steps by 4
#: at 2**54, so direct lines still order among themselves to 4 micros an impression.
DIRECT_FIRST = float(2**54)


log = logging.getLogger(__name__)

@dataclass(frozen=True, slots=True)
class Snapshot:
    """Campaign-side records at one point of the change log."""

    advertisers: list[Advertiser]
    campaigns: list[Campaign]
    ads: list[Ad]
    last_seq: int
    placements: list[Placement] = field(default_factory=list)
    models: list[ModelRelease] = field(default_factory=list)

    @classmethod
    def read(cls, store: SqlCampaignStore) -> Snapshot:
        """Every record of ``store``. Placements and model releases are read after the
        log position, so they hold at least every change up to it (a replay skips newer
        ones by version)."""
        return cls(*store.snapshot(), placements=store.list_placements(),
                   models=store.list_models())


class Catalog(CampaignReadModel):
    """Campaign records, ads and their targeting index for one ad-server process.

    ``prior_pctr`` and ``prior_pcvr`` (probabilities) set the static score of CPC and
    CPA ads in the index: the total value per impression at those priors, micros, the
    order retrieval stops in.
    """

    def __init__(self, index: AdIndex, prior_pctr: float = 0.001,
                 prior_pcvr: float = 0.01) -> None:
        super().__init__()  # campaigns, ads, placements, position and the lock
        self.index = index
        self.prior_pctr = prior_pctr
        self.prior_pcvr = prior_pcvr
        self.advertisers: dict[int, Advertiser] = {}
        self._ads_by_campaign: dict[int, set[int]] = {}
        self._targeting: dict[int, Expr] = {}
        # serving fields as arrays (the columnar decider); written before the index
        # makes an ad retrievable
        self.columns = CatalogColumns()
        self.caps = CapBook()  # which campaigns have frequency caps
        self.direct = DirectBook()  # which campaigns are sponsorship or guaranteed lines
        self.automatic = AutomaticBook()  # which campaigns bid automatically (shading)
        self.blocks = BlockBook()  # ads by what a request's block lists could name
        self.models: dict[int, ModelRelease] = {}  # registered click models, by id
        #: called with a target's new active model release whenever it changes
        self.model_listeners: list[Callable[[ModelRelease], None]] = []
        self._active_models: dict[str, ModelRelease] = {}  # target -> as last notified
        #: called with (the record held, the new one) whenever a campaign record is
        #: applied, under the catalogue's lock: the spend gate drops what a budget cut
        #: outdated before a request can read the new budget (``build_runtime``)
        self.campaign_listeners: list[Callable[[Campaign | None, Campaign], None]] = []

    @classmethod
    def shaped(cls, prior_pctr: float = 0.001,
               factory: Callable[[], AdIndex] = ConjunctionIndex,
               prior_pcvr: float = 0.01) -> Catalog:
        """A catalogue whose index is partitioned by creative shape
        (:class:`~adfunnel.index.shaped.ShapedIndex`): the columnar decider retrieves
        only ads that fit the request's slots."""
        catalog = cls(ConjunctionIndex(), prior_pctr, prior_pcvr)  # index replaced below
        catalog.index = ShapedIndex(catalog.shape_of, factory)
        return catalog

    def shape_of(self, ad_id: int) -> tuple[str, int, int]:
        """(format, width, height) of a held ad."""
        ad = self.ads[ad_id]
        return (ad.format, ad.width, ad.height)

    def load(self, snapshot: Snapshot) -> None:
        """Boot from a snapshot (one bulk index build); later changes arrive through
        :meth:`apply`."""
        with self._lock:
            for a in snapshot.advertisers:
                self.advertisers[a.id] = a
            for c in snapshot.campaigns:
                self.campaigns[c.id] = c
                self._targeting[c.id] = _compile(c)
            for ad in snapshot.ads:
                self.ads[ad.id] = ad
                self._ads_by_campaign.setdefault(ad.campaign_id, set()).add(ad.id)
            for p in snapshot.placements:
                self._apply_placement(p)
            self.columns.put_campaigns(list(self.campaigns.values()))
            self.caps.put(c for c in self.campaigns.values() if c.frequency_caps)
            self.direct.put(self.campaigns.values())
            self.automatic.put(self.campaigns.values())
            self.columns.put_ads(list(self.ads.values()))
            self.blocks.put(self.ads.values())
            self.index.build(self._entries(self.ads.values())[0])
            self.position = max(self.position, snapshot.last_seq)
            for m in snapshot.models:
                self._apply_model(m)
        self._model_changed()

    def apply(self, change: ChangeRecord, *, advance: bool = True) -> bool:
        """Apply one change record; False when it was not newer than what is held.

        ``advance`` moves the change-log position; only an in-order reader of the log
        (the change feed) may advance it, so a record applied out of order (a local
        write's callback) never makes the feed skip an earlier one.
        """
        applied = super().apply(change, advance=advance)
        if applied and isinstance(change.record, ModelRelease):
            self._model_changed()  # outside the lock: a listener loads an artifact
        return applied

    def active_model(self, target: str = "click") -> ModelRelease | None:
        """The release of ``target`` ad servers serve with: its active one of highest
        id (None: none)."""
        with self._lock:
            active = [m for m in self.models.values() if m.active and m.target == target]
        return max(active, key=lambda m: m.id) if active else None

    def _model_changed(self) -> None:
        for target in MODEL_TARGETS:
            active = self.active_model(target)
            if active is None or active == self._active_models.get(target):
                continue
            self._active_models[target] = active
            for listener in list(self.model_listeners):
                try:
                    listener(active)
                except Exception:  # a broken artifact must not stop the change feed
                    log.exception("a model listener failed on release %r", active)

    def _apply_model(self, m: ModelRelease) -> bool:
        return keep_newer(self.models, m)

    def _put(self, rec: Advertiser | Campaign | Ad | Placement | ModelRelease) -> bool:
        """The read model's record rule, plus advertisers, models, columns and index."""
        if isinstance(rec, Advertiser):
            return keep_newer(self.advertisers, rec)
        if isinstance(rec, Campaign):
            return self._apply_campaign(rec)
        if isinstance(rec, Placement):
            return self._apply_placement(rec)
        if isinstance(rec, ModelRelease):
            return self._apply_model(rec)
        return self._apply_ad(rec)

    def _apply_placement(self, p: Placement) -> bool:
        return keep_newer(self.placements, p)

    def _apply_campaign(self, c: Campaign) -> bool:
        held = self.campaigns.get(c.id)
        if held is not None and held.version >= c.version:
            return False
        self.campaigns[c.id] = c
        self.columns.put_campaigns([c])
        if c.frequency_caps or (held is not None and held.frequency_caps):
            self.caps.put([c])
        if c.priority is not Priority.AUCTION or (held is not None
                                                  and held.priority is not Priority.AUCTION):
            self.direct.put([c])
        self.automatic.put([c])
        if held is None or held.targeting != c.targeting:
            self._targeting[c.id] = _compile(c)
        self._reindex(self.ads[a] for a in self._ads_by_campaign.get(c.id, ()))
        for listener in self.campaign_listeners:
            listener(held, c)
        return True

    def _apply_ad(self, ad: Ad) -> bool:
        held = self.ads.get(ad.id)
        if held is not None and held.version >= ad.version:
            return False
        self.ads[ad.id] = ad
        self._ads_by_campaign.setdefault(ad.campaign_id, set()).add(ad.id)
        self.columns.put_ads([ad])
        self.blocks.put((ad,))  # before the index makes a new ad retrievable
        self._reindex((ad,))
        return True

    def _entries(self, ads: Iterable[Ad]) -> tuple[list[tuple[int, Expr, float]], list[int]]:
        """(index entries of servable ads, ids of ads that must not be indexed)."""
        entries: list[tuple[int, Expr, float]] = []
        dropped: list[int] = []
        for ad in ads:
            campaign = self.campaigns.get(ad.campaign_id)
            if campaign is None or not ad.approved:
                dropped.append(ad.id)
            else:
                score = self.static_score(campaign) + ad.quality_micros  # the total's prior
                if campaign.priority is not Priority.AUCTION:
                    # retrieval keeps only the best-scored ads: a direct line sold below
                    # the auction's bids must never be cut before its tier is served
                    score += DIRECT_FIRST
                entries.append((ad.id, self._targeting[campaign.id], score))
        return entries, dropped

    def _reindex(self, ads: Iterable[Ad]) -> None:
        entries, dropped = self._entries(ads)
        if dropped:
            self.index.remove_many(dropped)
        if entries:
            self.index.upsert_many(entries)

    def static_score(self, c: Campaign) -> float:
        """Expected value per impression at the prior pCTR (and, for CPA, pCVR), micros
        (index ordering): the auction's total value before any count is seen."""
        if c.bid_type is BidType.CPM:
            return c.bid_micros / MILLE
        if c.bid_type is BidType.CPC:
            return c.bid_micros * self.prior_pctr
        return c.bid_micros * self.prior_pctr * self.prior_pcvr


def _compile(c: Campaign) -> Expr:
    return parse_expr(json.loads(c.targeting)) if c.targeting else EVERYONE
