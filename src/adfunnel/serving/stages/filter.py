"""Step 1 of the columnar decision, the filter: boolean masks over the retrieved ads'
columns (ad status, slot shape, the placement's allowed sizes and formats, html only where
listed), the request's block lists (:mod:`adfunnel.serving.blocks`), then once per
distinct campaign, in first-retrieved order, status, flight and daypart; and the reason
codes the columnar stages count rejections by.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import datetime

import numpy as np

from adfunnel.budget.gate import BUDGET_EXHAUSTED, PACED_OUT
from adfunnel.campaigns.model import Placement
from adfunnel.serving.blocks import drop_blocked, request_blocks
from adfunnel.serving.catalog import Catalog
from adfunnel.serving.columns import MAX_DENSE_ID, ColumnsView
from adfunnel.serving.decision import (
    AD_PAUSED,
    BLOCKED,
    CAMPAIGN_COMPLETED,
    CAMPAIGN_ENDED,
    CAMPAIGN_PAUSED,
    FORMAT_NOT_ALLOWED,
    HTML_NOT_ALLOWED,
    NO_FITTING_SLOT,
    OUT_OF_FLIGHT,
    OUTSIDE_DAYPART,
    SIZE_NOT_ALLOWED,
    placement_rejection,
)
from adfunnel.serving.kernels import campaign_checks, mask_ads
from adfunnel.serving.request import SelectRequest
from adfunnel.serving.tiers import AHEAD_OF_PLAN, DIRECT_LINE, GOAL_MET, SHARE_NOT_DRAWN

# reason codes of the masks: index into REASONS (0 = still a candidate)
REASONS: tuple[str | None, ...] = (
    None, AD_PAUSED, NO_FITTING_SLOT, SIZE_NOT_ALLOWED, FORMAT_NOT_ALLOWED,
    CAMPAIGN_PAUSED, CAMPAIGN_ENDED, CAMPAIGN_COMPLETED, OUT_OF_FLIGHT, OUTSIDE_DAYPART,
    PACED_OUT, BUDGET_EXHAUSTED, HTML_NOT_ALLOWED, GOAL_MET, AHEAD_OF_PLAN, SHARE_NOT_DRAWN,
    BLOCKED, DIRECT_LINE,
)
#: reason -> its code (its index in :data:`REASONS`)
CODE = {r: i for i, r in enumerate(REASONS) if r is not None}
#: c_status value (columns.STATUS_CODES) -> reason code
_STATUS_REASON = np.array([0, CODE[CAMPAIGN_PAUSED], CODE[CAMPAIGN_ENDED],
                           CODE[CAMPAIGN_COMPLETED]], dtype=np.int8)


class FilterStage:
    """The filter stage of :class:`~adfunnel.serving.decider.ColumnarDecider` (a part of
    it: the decider holds the catalogue and the caches below)."""

    catalog: Catalog
    #: placement id -> (its version, shapes known, reason code per shape code)
    _placement_reasons: dict[str, tuple[int, int, np.ndarray]]
    _distinct: Scratch

    def _servable(self, req: SelectRequest, ids: np.ndarray, view: ColumnsView,
                  now: datetime, counts: dict[str, int]) -> Servable | None:
        """Steps 1-2 without side effects: the ads that fit and their campaigns' status,
        flight and daypart (counted into ``counts``); None when an id is beyond the
        columns (:meth:`_mask_ads`)."""
        masked = None
        if not len(ids) or int(ids.max()) < len(view.ads):
            masked = self._mask_ads(req, ids, view, counts)
        if masked is None:
            return None
        ids, camp, versions = masked
        ordinals, hours = self.catalog.columns.zones.at(now)
        uc, inverse, c_version, verdict, local, charges, budgets = campaign_checks(
            camp, self._distinct.scratch(len(view.campaigns)), view.campaigns, view.dayparts,
            ordinals, hours, _STATUS_REASON, CODE[OUT_OF_FLIGHT], CODE[OUTSIDE_DAYPART])
        versions.campaigns(uc, c_version)  # read before the other fields (ColumnsView)
        return Servable(ids, camp, versions, uc, inverse, verdict, local, charges, budgets)

    def _mask_ads(self, req: SelectRequest, ids: np.ndarray, view: ColumnsView,
                  counts: dict[str, int]) -> tuple[np.ndarray, np.ndarray, Versions] | None:
        """(ad ids still in, their campaign ids, the versions read), in retrieval order;
        the others are counted per reason into ``counts``. None: an ad's campaign id is
        beyond the columns' dense range (the reference path decides).

        Ads or campaigns the catalogue no longer holds are dropped without a reason,
        as the reference path drops them."""
        placement = self.catalog.placements.get(req.placement.id)
        tally = np.zeros(len(REASONS), dtype=np.int64)
        keep, camp, ad_version, big = mask_ads(ids, view.ads, view.campaigns,
                                               self._shape_reasons(req, placement), tally,
                                               MAX_DENSE_ID)
        if big:
            return None
        blocks = request_blocks(req)  # None without block lists: nothing to pay
        if blocks is not None:
            n, keep, (camp, ad_version) = drop_blocked(self.catalog.blocks, blocks, keep,
                                                       camp, ad_version)
            tally[CODE[BLOCKED]] += n
        for code in np.flatnonzero(tally).tolist():
            add_reason(counts, REASONS[code] or "", int(tally[code]))
        return keep, camp, Versions(keep, ad_version)

    def _shape_reasons(self, req: SelectRequest, placement: Placement | None) -> np.ndarray:
        """Reason code per shape code for this request (int8; 0: a slot takes the shape
        and the placement allows it)."""
        cols = self.catalog.columns
        table = np.full(max(len(cols.shape_list), 1), CODE[NO_FITTING_SLOT], dtype=np.int8)
        for s in req.slots:
            code = cols.shape_code(s.format, s.width, s.height)
            if code >= 0:
                table[code] = 0
        rules = self._placement_table(placement)  # None: html is refused all the same
        fits = table == 0
        table[fits] = rules[: len(table)][fits]
        return table

    def _placement_table(self, p: Placement | None) -> np.ndarray:
        """Reason code per shape code for placement ``p`` (0: allowed; None: a placement
        the operator has not configured, keyed "" as no configured id is empty)."""
        shapes = self.catalog.columns.shape_list
        key, version = ("", 0) if p is None else (p.id, p.version)
        held = self._placement_reasons.get(key)
        if held is not None and held[0] == version and held[1] == len(shapes):
            return held[2]
        table = np.zeros(max(len(shapes), 1), dtype=np.int8)
        for code, (fmt, w, h) in enumerate(list(shapes)):
            reason = placement_rejection(p, fmt, w, h)  # the reference path's rule
            if reason is not None:
                table[code] = CODE[reason]
        self._placement_reasons[key] = (version, len(shapes), table)
        return table


def count_codes(counts: dict[str, int], reasons: np.ndarray, extra: list[str]) -> None:
    """Add the candidates' reason codes (0: none) to ``counts``, by name; codes past
    :data:`REASONS` are named in ``extra``."""
    names = [*REASONS, *extra]
    tally = np.bincount(reasons[reasons > 0], minlength=len(names))
    for code in np.flatnonzero(tally):
        add_reason(counts, names[code] or "", int(tally[code]))


def add_reason(counts: dict[str, int], reason: str, n: int) -> None:
    """Count ``n`` more rejections for ``reason`` (none: ``counts`` unchanged)."""
    if n:
        counts[reason] = counts.get(reason, 0) + n


@dataclass(slots=True)
class Servable:
    """What :meth:`ColumnarDecider._servable` found: the candidates that fit (ids,
    campaign ids, versions read) and per distinct campaign (``uc``; ``inverse`` maps
    each candidate to its entry) its reason code so far, local date ordinal and the
    gate's inputs."""

    ids: np.ndarray
    camp: np.ndarray
    versions: Versions
    uc: np.ndarray
    inverse: np.ndarray
    verdict: np.ndarray
    local: np.ndarray
    charges: np.ndarray
    budgets: np.ndarray

    @property
    def live_candidates(self) -> int:
        """Candidates whose campaign is still in (status, flight, daypart)."""
        return int(np.count_nonzero(self.verdict[self.inverse] == 0))


class Versions:
    """Ad and campaign versions as a decision read them, before their other columns."""

    def __init__(self, ad_ids: np.ndarray, ad_version: np.ndarray) -> None:
        self.ad_ids, self.ad_version = ad_ids, ad_version
        self.campaign_ids = self.c_version = np.zeros(0, dtype=np.int64)

    def campaigns(self, campaign_ids: np.ndarray, c_version: np.ndarray) -> None:
        self.campaign_ids, self.c_version = campaign_ids, c_version

    def read(self, ad_id: int, campaign_id: int) -> tuple[int, int]:
        """(ad version, campaign version) read for a winner (a few per decision)."""
        i = int(np.flatnonzero(self.ad_ids == ad_id)[0])
        j = int(np.flatnonzero(self.campaign_ids == campaign_id)[0])
        return int(self.ad_version[i]), int(self.c_version[j])


class Scratch:
    """A per-thread int64 array of −1 by campaign id, as long as asked, for
    :func:`~adfunnel.serving.kernels.campaign_checks` (which leaves it all −1)."""

    def __init__(self) -> None:
        self._local = threading.local()

    def scratch(self, n: int) -> np.ndarray:
        buf: np.ndarray | None = getattr(self._local, "buf", None)
        if buf is None or len(buf) < n:
            buf = self._local.buf = np.full(max(n, 1024), -1, dtype=np.int64)
        return buf
