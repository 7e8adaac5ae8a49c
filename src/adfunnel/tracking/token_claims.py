"""What a tracking token vouches for (:class:`TokenClaims`) and why one is refused.

The claims of one served ad, each field checked on construction; the vocabularies they
draw on (billing types, billable events); :class:`InvalidToken`, the only error a
token's or click id's check lets escape, with its typed reason. The wire forms are
:mod:`adfunnel.tracking.token` (serve tokens) and :mod:`adfunnel.tracking.click_id`.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Literal

#: Billing types a token may carry.
BILLING_TYPES = frozenset({"CPM", "CPC", "CPA"})
#: Longest impression id (the ledger column is 64 characters).
MAX_IMPRESSION_ID_CHARS = 64
#: Longest placement name (the ledger column is 200 characters).
MAX_PLACEMENT_CHARS = 200
#: What bills a CPM impression: the ``/vi`` beacon (viewable), the ``/i`` beacon
#: (rendered), for an OpenRTB bid its billing notice (``notice``: ``/rtb/bill``; neither
#: beacon bills then) or its markup's ``/i`` at the clearing price ``p`` it carries
#: (``exchange_beacon``), :mod:`adfunnel.tracking.notices`; for an OpenRTB bid of a
#: test request (``test = 1``) nothing (``test``: :data:`TEST_BID`).
BILLABLE_EVENTS = frozenset({"viewable", "rendered", "notice", "exchange_beacon", "test"})
#: The billable event of an OpenRTB test bid: no beacon or notice of it bills, and none
#: is stored (answered as a house ad's: counted only).
TEST_BID = "test"
#: The billable event of an OpenRTB bid billed on its markup's ``/i``: only such a token
#: bills the clearing price ``p`` the beacon carries (any other bills its own price).
EXCHANGE_BEACON = "exchange_beacon"
#: What a token from before version 4 bills on (every impression billed on render then).
LEGACY_BILLABLE_EVENT = "rendered"

_INT64_MAX = 2**63 - 1
_IMPRESSION_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")

Reason = Literal["malformed", "bad_signature", "expired", "serve_token", "invalid_traffic"]


class InvalidToken(Exception):
    """A token that must not be trusted; ``reason`` is ``malformed``, ``bad_signature``
    or ``expired`` (tier-1 invalid traffic counts these), and for a click id also
    ``serve_token`` (a serve token where a click id belongs) or ``invalid_traffic``
    (the id of a click the tracker flagged). ``claims``: for ``expired`` only, the
    authentic claims of the expired token (a late click still finds its landing page)."""

    def __init__(self, reason: Reason, claims: TokenClaims | None = None) -> None:
        super().__init__(reason)
        self.reason: Reason = reason
        self.claims = claims


@dataclass(frozen=True, slots=True)
class TokenClaims:
    """What the ad server vouches for when it serves one ad.

    ``price_micros`` is the auction price in the bid's unit, integer micros: per
    thousand impressions for CPM (one impression bills it ÷ 1000 with the fraction
    carried by the ledger), per click for CPC, per conversion for CPA.
    ``issued_at`` and ``expires_at`` are unix seconds; the token is valid while
    ``now < expires_at``. ``expected_micros`` is the serve's expected cost in micros as
    the budget counted it (DESIGN.md §The funnel, step 7); None in older tokens.
    ``billable_event``: ``viewable`` or ``rendered``, the beacon that bills the
    impression (the campaign's setting when it was served; ``rendered`` in tokens from
    before version 4); for an OpenRTB bid ``notice`` (its billing notice bills it) or
    ``exchange_beacon`` (its markup's ``/i`` bills the clearing price it carries).

    Raises:
        ValueError: on construction, for a field outside its domain: impression id
            not 1-64 of ``[A-Za-z0-9_-]``, ids or price negative or above int64,
            unknown billing type, placement empty or over 200 characters, negative
            times or ``expires_at < issued_at``, a billable event other than
            ``viewable``, ``rendered``, ``notice`` or ``exchange_beacon``.
    """

    impression_id: str
    ad_id: int
    campaign_id: int
    price_micros: int
    billing_type: str
    placement: str
    issued_at: int
    expires_at: int
    expected_micros: int | None = None
    billable_event: str = LEGACY_BILLABLE_EVENT

    def __post_init__(self) -> None:
        if not isinstance(self.impression_id, str) or not _IMPRESSION_ID.fullmatch(
            self.impression_id
        ):
            raise ValueError(f"impression_id: 1-64 of [A-Za-z0-9_-], got {self.impression_id!r}")
        ints = (self.ad_id, self.campaign_id, self.price_micros, self.issued_at,
                self.expires_at)
        if not all(type(v) is int and 0 <= v <= _INT64_MAX for v in ints):  # not bool
            for name in ("ad_id", "campaign_id", "price_micros", "issued_at", "expires_at"):
                value = getattr(self, name)
                if isinstance(value, bool) or not isinstance(value, int):
                    raise ValueError(f"{name}: must be an int, got {value!r}")
                if not 0 <= value <= _INT64_MAX:
                    raise ValueError(f"{name}: must be in [0, 2**63 - 1], got {value}")
        if self.billing_type not in BILLING_TYPES:
            raise ValueError(f"billing_type: CPM, CPC or CPA, got {self.billing_type!r}")
        if (
            not isinstance(self.placement, str)
            or not self.placement
            or len(self.placement) > MAX_PLACEMENT_CHARS
        ):
            raise ValueError(
                f"placement: 1-{MAX_PLACEMENT_CHARS} characters, got {self.placement!r:.80}"
            )
        if self.expires_at < self.issued_at:
            raise ValueError(f"expires_at {self.expires_at} is before issued_at {self.issued_at}")
        e = self.expected_micros
        if e is not None and (isinstance(e, bool) or not isinstance(e, int)
                              or not 0 <= e <= _INT64_MAX):
            raise ValueError(f"expected_micros: an int in [0, 2**63 - 1] or None, got {e!r}")
        if not isinstance(self.billable_event, str) or self.billable_event not in BILLABLE_EVENTS:
            raise ValueError("billable_event: viewable, rendered, notice, exchange_beacon or "
                             f"test, got {self.billable_event!r:.40}")


def new_impression_id() -> str:
    """A fresh random impression id: 32 lowercase hex characters (128 random bits)."""
    return os.urandom(16).hex()
