"""The served log's record: one committed decision as the served log keeps it; its codec.

Plain msgspec structs (:class:`ServedRecord` and its parts), one JSON line each in the raw
files of :mod:`adfunnel.events.served_log`; the serving plane builds them
(:mod:`adfunnel.serving.served_record`). The user key is never stored: only
``HMAC-SHA256(salt, key)`` in hex (:func:`hash_user_key`).
"""

from __future__ import annotations

import hashlib
import hmac

import msgspec

#: Version of the record layout; bumped when a field changes meaning or type.
SCHEMA_VERSION = 1


class SlotRecord(msgspec.Struct, forbid_unknown_fields=False):
    """One requested slot as the request gave it (sizes in pixels, reserve in micros per
    thousand impressions; None: the placement's)."""

    id: str
    position: int
    width: int
    height: int
    format: str
    reserve_cpm_micros: int | None = None


class RejectionRecord(msgspec.Struct, forbid_unknown_fields=False):
    """One rejected candidate with its reason code (``detail``: e.g. the cap that bound)."""

    ad_id: int
    campaign_id: int
    reason: str
    detail: str | None = None


class WinnerRecord(msgspec.Struct, forbid_unknown_fields=False):
    """One filled slot (a paid ad; house fills are in ``ServedRecord.house_slots``).

    Money is integer micros: ``bid_micros`` and ``price_micros`` in the bid's unit (per
    mille for CPM, per click for CPC, per conversion for CPA), ``charge_micros`` the
    most its billable event can bill, ``expected_micros`` the serve's expected cost;
    ``quality_micros`` and ``total_micros`` are micros per impression (floats, as the
    auction ranks them). ``pctr``/``pcvr`` are probabilities. ``pacing_p`` is the
    campaign's participation probability when it was served (None: not given);
    ``propensity`` the probability that this ad was shown in this slot (None until the
    model issue adds exploration). ``impression_id`` is the id in the ad's token: the
    key of its ledger rows.
    """

    slot_id: str
    position: int
    impression_id: str
    ad_id: int
    campaign_id: int
    advertiser_id: int
    bid_type: str
    bid_micros: int
    price_micros: int
    charge_micros: int
    expected_micros: int
    pctr: float
    pcvr: float
    quality_micros: float
    total_micros: float
    pacing_p: float | None = None
    propensity: float | None = None
    #: the tier that filled the slot: sponsorship, guaranteed or auction (None: a
    #: record written before tiers were logged)
    tier: str | None = None
    #: the click model's own pCTR of the winner, before the recalibration factor
    #: (``pctr`` is the one used: raw × factor); None where the model did not give it
    #: (no model, a fallback, an ad it was not trained on, or an older record)
    model_pctr: float | None = None
    #: the bid multiplier λ of an automatic campaign when it was served (its bid
    #: ``bid_micros`` = ⌊v ÷ λ⌋); None: a manual bid, or not given
    bid_multiplier: float | None = None
    #: the total per impression (micros, a float as the auction ranks) the auction's
    #: winner had to reach to keep its slot: the next ranked candidate's total, or the
    #: reserve per impression when none ranked after it (None: not an auction win, an
    #: exploration pick, or a record written before it was logged). The observations
    #: first-price shading is fitted on (:mod:`adfunnel.learn.shading_fit`).
    beat_micros: float | None = None
    #: the winner's bid before first-price shading, in the bid's unit (None: not shaded;
    #: ``bid_micros`` is then the bid it came with)
    unshaded_bid_micros: int | None = None
    #: an OpenRTB bid's auction type (1 first price, 2 second price; None: not an
    #: OpenRTB bid). Where set, ``price_micros`` is the bid we sent the exchange, CPM
    #: micros per mille whatever ``bid_type`` (the internal auction only chose the ad;
    #: the exchange's auction prices it), and ``charge_micros``/``expected_micros`` its
    #: worst cost per impression
    openrtb_at: int | None = None


class ServedRecord(msgspec.Struct, forbid_unknown_fields=False):
    """One committed decision as the served log keeps it.

    ``time``: Unix seconds from the injected clock when the decision was recorded.
    ``user_hash``: hex HMAC-SHA256 of the user key under the log's salt (None: the
    request had no key). ``attributes``: the request's user attributes, each value a
    list of strings (a single string becomes a one-item list). ``reason_counts``:
    rejected candidates per reason code (always; the columnar path keeps only these).
    ``rejections``: the first ``max_rejections`` per-candidate rejections where the
    decision kept them (explain requests, the reference path), ``rejections_total`` how
    many it had. The decision keeps no score for a rejected candidate, so scores are
    the winners' (:class:`WinnerRecord`). ``truncated``: retrieval stopped at its limit.
    ``exploration``/``model_version``: None until the model issue fills them;
    ``index_version``: the targeting index version the decision read.
    """

    request_id: str
    time: float
    user_hash: str | None
    attributes: dict[str, list[str]]
    placement: str
    exchange: str | None
    domain: str | None
    placement_reserve_cpm_micros: int
    slots: list[SlotRecord]
    winners: list[WinnerRecord]
    house_slots: list[str]
    reason_counts: dict[str, int]
    rejections: list[RejectionRecord]
    rejections_total: int
    truncated: bool
    index_version: int
    exploration: bool | None = None
    model_version: str | None = None
    #: an OpenRTB request's ``source.schain`` (the supply chain, compact JSON text);
    #: None: not an OpenRTB request, or it gave none
    supply_chain: str | None = None
    schema_version: int = SCHEMA_VERSION


#: Decodes one raw line (``msgspec.DecodeError`` / ``ValidationError`` on a bad one).
decode_record = msgspec.json.Decoder(ServedRecord).decode


def hash_user_key(key: str | None, salt: bytes) -> str | None:
    """Hex HMAC-SHA256 of ``key`` under ``salt`` (64 characters); None for no key."""
    if key is None:
        return None
    return hmac.new(salt, key.encode("utf-8"), hashlib.sha256).hexdigest()
