"""The decision's vocabulary, shared by both deciders: reason codes, :class:`Decision`,
:class:`Placed`, slot runs, reserves, the expected cost and the placing of a winner.

The production path (:mod:`adfunnel.serving.decider`) and the per-candidate reference
path (:mod:`adfunnel.serving.reference`) both speak it; consumers (the HTTP layer, the
decision log, the served log, benchmarks) import only this module. Nothing here decides.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

import numpy as np

from adfunnel.auction.gsp import Candidate, Rejection, Win
from adfunnel.budget.gate import Served, SpendGate
from adfunnel.campaigns.creative import HTML_FORMAT
from adfunnel.campaigns.model import Ad, BidType, Campaign, Placement
from adfunnel.campaigns.schedule import local_day
from adfunnel.money import impression_charge_bound, round_micros
from adfunnel.serving.caps import CAPPED, CapCounts, CapGate
from adfunnel.serving.house import HouseFill
from adfunnel.serving.request import SelectRequest, SlotIn
from adfunnel.serving.tiers import AUCTION, HOUSE
from adfunnel.tracking.token import TokenClaims, sign
from adfunnel.tracking.token_claims import new_impression_id

# Reason codes of the filter stage (the auction, the budget gate and the caps add their own).
AD_PAUSED = "ad_paused"
CAMPAIGN_PAUSED = "paused"
CAMPAIGN_ENDED = "ended"
CAMPAIGN_COMPLETED = "completed"  # lifetime budget spent
OUT_OF_FLIGHT = "out_of_flight"
OUTSIDE_DAYPART = "outside_daypart"
NO_FITTING_SLOT = "no_fitting_slot"
SIZE_NOT_ALLOWED = "size_not_allowed"  # the placement's operator does not allow the size
FORMAT_NOT_ALLOWED = "format_not_allowed"
#: an html ad (format ``html``) on a placement that does not list ``html`` among its
#: allowed formats, or on one the operator has not configured: markup is opt-in
HTML_NOT_ALLOWED = "html_not_allowed"
#: an ad in a category, of a domain or for an app the request's block lists refuse
#: (detail names which: ``category IAB7``; ``adfunnel.serving.blocks``)
BLOCKED = "blocked"
DEADLINE = "deadline"
#: Reason carried (in counts) by eligible candidates beyond the pre-rank cut.
PRERANK_CUT = "prerank_cut"
#: Reason of a winner whose ad or campaign was edited while the decision read it.
CHANGED = "changed_during_decision"

#: Most auctions per decision when winners lose their slot to a frequency cap counted
#: by a parallel request (each round refills the slots they leave).
MAX_CAP_ROUNDS = 3
#: The detail of a winner refused when its caps are counted (the reference path's).
COUNTED_FIRST = {CAPPED: "reached at count: a parallel serve came first"}


@dataclass(frozen=True, slots=True)
class Placed:
    """A filled slot ready to answer: the auction's win plus what the response needs.

    The tracking token is signed once, when first read (:attr:`token`), from ``claims``
    under ``token_key``: a winner the OpenRTB endpoint re-prices gets new claims
    (:func:`dataclasses.replace` keeps no token) and is signed only at its bid's price,
    and a winner dropped before the answer is never signed."""

    win: Win
    ad: Ad
    campaign: Campaign
    charge_micros: int  # most the billable event can bill (CPM impression: price/1000 rounded up)
    claims: TokenClaims  # what the token vouches for (validated on construction)
    served: Served  # the expected spend the decider's ``commit`` records once the answer is sent
    #: the tier that filled the slot (:mod:`adfunnel.serving.tiers`): a sponsorship or
    #: guaranteed line at its contract rate, or the auction
    tier: str = AUCTION
    #: the key the token is signed with (never shown: not in ``repr``)
    token_key: bytes = field(kw_only=True, repr=False, compare=False)
    _token: str | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def token(self) -> str:
        """The signed token of ``claims`` (:func:`~adfunnel.tracking.token.sign`), signed
        on first read and kept: the same text every read."""
        token = self._token
        if token is None:
            token = sign(self.claims, self.token_key)
            object.__setattr__(self, "_token", token)  # a cache, not a change of value
        return token


@dataclass(slots=True)
class Decision:
    request_id: str
    placed: list[Placed]
    rejections: list[Rejection]
    index_version: int
    late: bool = False
    truncated: bool = False
    house: list[HouseFill] = field(default_factory=list)  # empty slots given the house ad
    #: rejections counted per reason (the columnar path); None where ``rejections``
    #: holds every candidate's (the reference path, explain requests)
    reason_counts: dict[str, int] | None = None
    #: the click model that scored the pre-rank's survivors (None: the prior's pCTR)
    model_version: str | None = None
    #: the model was configured but the prior's scores decided (late, no time, error)
    fallback: bool = False
    #: the recalibration factor the model's pCTRs were multiplied by (None: the model
    #: did not score), and the ad ids whose pCTR the model gave (the others kept the
    #: prior's): the served log keeps each winner's raw model pCTR beside the used one
    calibration_factor: float | None = None
    model_scored: np.ndarray | None = None
    #: in the exploration slice (None: no exploration configured)
    exploration: bool | None = None
    #: slot id -> probability that the ad shown there was shown (exploration configured)
    propensities: dict[str, float] = field(default_factory=dict)
    #: what the decision counted in the frequency-cap store (None: nothing); given back
    #: by the decider's ``abandon`` when the answer is not sent
    cap_counts: CapCounts | None = None
    #: first-price shading, per slot run (explain requests: whether and with which
    #: curve automatic bids were shaded; :mod:`adfunnel.serving.bid_shading`)
    shading: list[str] = field(default_factory=list)
    #: slot id -> the auction winner's bid before shading, where it was shaded
    unshaded: dict[str, int] = field(default_factory=dict)
    #: slot id -> the total per impression the auction's winner had to beat (micros)
    beats: dict[str, float] = field(default_factory=dict)
    #: an OpenRTB request's auction type (1 first price, 2 second; None: not OpenRTB),
    #: and slot id -> the bid we sent for the winner there (CPM micros): the served
    #: log's winner price (:mod:`adfunnel.openrtb.pricing`)
    openrtb_at: int | None = None
    bids: dict[str, int] = field(default_factory=dict)

    def slot_tiers(self) -> dict[str, str]:
        """The tier that filled each filled slot (``sponsorship``, ``guaranteed``,
        ``auction`` or ``house``; :mod:`adfunnel.serving.tiers`), by slot id."""
        out = {p.win.slot_id: p.tier for p in self.placed}
        out.update((h.slot_id, HOUSE) for h in self.house)
        return out

    def rejection_counts(self) -> dict[str, int]:
        """Rejected candidates per reason code, whichever path decided."""
        if self.reason_counts is not None:
            return dict(self.reason_counts)
        out: dict[str, int] = {}
        for r in self.rejections:
            out[r.reason] = out.get(r.reason, 0) + 1
        return out


class Decides(Protocol):
    """What the request path needs of a decider, whichever path it takes."""

    gate: SpendGate

    def decide(self, req: SelectRequest, request_id: str, deadline_at_ms: float) -> Decision: ...

    def commit(self, decision: Decision) -> None: ...

    def abandon(self, decision: Decision, ad_ids: Collection[int] | None = None) -> None: ...


def commit_served(decision: Decision, gate: SpendGate) -> None:
    """Record the expected spend of an answer being sent in time (DESIGN.md §The funnel:
    only answers sent in time commit spend)."""
    for p in decision.placed:
        gate.record_served(p.served)


def give_back_caps(decision: Decision, caps: CapGate | None,
                   ad_ids: Collection[int] | None = None) -> None:
    """Give back the frequency-cap counts of a decision whose answer is not sent, the one
    thing a decision writes (once: the decision forgets them). ``ad_ids``: only those
    of these winners (dropped from an answer that is sent: the others keep theirs);
    None: every count of the decision."""
    counts = decision.cap_counts
    if counts is None:
        return
    if ad_ids is None:
        given, decision.cap_counts = counts, None
    else:
        given, kept = counts.split(ad_ids)
        decision.cap_counts = kept if kept.plans else None
    if given.plans and caps is not None:
        caps.release(given)


def place(win: Win, ad: Ad, c: Campaign, placement: str, now: datetime, token_key: bytes,
          token_ttl_s: int, tier: str = AUCTION) -> Placed:
    """A winner made ready to answer: its charge bound, expected cost and token claims.
    ``tier``: the tier that filled the slot (a direct line's price is its contract rate)."""
    price = win.price_micros
    # the most this serve can bill per event (budget side: a bound, rounded up);
    # the token carries the exact price in the bid's unit for the ledger
    charge = impression_charge_bound(price) if c.bid_type is BidType.CPM else price
    issued = int(now.timestamp())
    expected = expected_cost(win.candidate, charge)
    claims = TokenClaims(
        impression_id=new_impression_id(),
        ad_id=ad.id,
        campaign_id=c.id,
        price_micros=price,
        billing_type=c.bid_type.value,
        placement=placement,
        issued_at=issued,
        expires_at=issued + token_ttl_s,
        expected_micros=expected,  # what its billable event settles in the budget
        # which beacon bills it (/vi or /i): the campaign's setting at serve time
        billable_event=c.billable_event.value,
    )
    served = Served(c.id, local_day(now, c.time_zone), claims.impression_id,
                    expected, float(claims.expires_at), max_charge_micros=charge)
    # signed when the answer reads the token (Placed.token): an OpenRTB bid gets new
    # claims at its own price, and signing here too would sign every bid twice
    return Placed(win, ad, c, charge, claims, served, tier, token_key=token_key)


def expected_cost(cand: Candidate, charge: int) -> int:
    """Expected cost of one served impression, micros (DESIGN.md §The funnel, step 7).

    CPM: the impression's charge; CPC: charge × pCTR; CPA: charge × pCTR × pCVR.
    """
    if cand.bid_type is BidType.CPM:
        return charge
    return round_micros(charge * cand.action_rate)


def applied_reserve(req: SelectRequest, slot: SlotIn, placement: Placement | None) -> int:
    """The reserve applied to ``slot``, micros per mille: the higher of the request's (the
    slot's own, else the placement's in the request) and the operator's configured one
    for the request's ``geo.country`` (else the placement's default)."""
    asked = slot.reserve_cpm_micros
    if asked is None:
        asked = req.placement.reserve_cpm_micros
    if placement is None:
        return asked
    country = req.user.attributes.get("geo.country")
    given = country if isinstance(country, list) else [country] if country else []
    return max(asked, placement.reserve_for(str(c).upper() for c in given))


def placement_rejection(placement: Placement | None, fmt: str, width: int,
                        height: int) -> str | None:
    """Why ``placement`` (None: not configured) refuses an ad of this shape (html first,
    then its size), or None. An empty ``allowed_formats`` allows every format but
    ``html``, which a placement must list."""
    if fmt == HTML_FORMAT and (placement is None or HTML_FORMAT not in placement.allowed_formats):
        return HTML_NOT_ALLOWED
    if placement is None:
        return None
    if not placement.size_allowed(width, height):
        return SIZE_NOT_ALLOWED
    if not placement.format_allowed(fmt):
        return FORMAT_NOT_ALLOWED
    return None


def slot_runs(slots: list[SlotIn]) -> list[list[SlotIn]]:
    """Slots in position order, grouped into runs of one shape (one GSP auction each)."""
    runs: list[list[SlotIn]] = []
    for s in sorted(slots, key=lambda s: (s.position, s.id)):
        key = (s.format, s.width, s.height, s.reserve_cpm_micros)
        if runs and (runs[-1][0].format, runs[-1][0].width, runs[-1][0].height,
                     runs[-1][0].reserve_cpm_micros) == key:
            runs[-1].append(s)
        else:
            runs.append([s])
    return runs
