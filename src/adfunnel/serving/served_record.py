"""The served-log record of a committed decision: what the ad server hands the served log.

The served log (:mod:`adfunnel.events.served_log`) writes records and knows nothing of
the decider; this module builds its :class:`~adfunnel.events.served_schema.ServedRecord`
from a :class:`Decision` and the request it answered. The request path only reads the
winners' pacing rates and queues a :class:`DecisionSource`; the record itself is built
on the served log's writer thread (:meth:`DecisionSource.build`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, NamedTuple

from adfunnel.budget.multipliers import automatic
from adfunnel.events.served_log import DEFAULT_MAX_REJECTIONS
from adfunnel.events.served_schema import (
    RejectionRecord,
    ServedRecord,
    SlotRecord,
    WinnerRecord,
    hash_user_key,
)

if TYPE_CHECKING:
    from adfunnel.serving.decision import Decision
    from adfunnel.serving.request import SelectRequest


class DecisionSource(NamedTuple):
    """A committed decision queued for the served log (a
    :class:`~adfunnel.events.served_log.RecordSource`): the decision, its request and what
    was read on the request path; its record is built later, on the writer thread."""

    decision: Decision
    request: SelectRequest
    pacing: dict[int, float] | None
    exploration: bool | None
    propensities: Mapping[str, float] | None
    model_version: str | None
    multipliers: dict[int, float] | None = None
    #: an OpenRTB request's supply chain (``source.schain`` as JSON text)
    supply_chain: str | None = None

    @property
    def request_id(self) -> str:
        """The decision's request id."""
        return self.decision.request_id

    def build(self, time_s: float, salt: bytes, max_rejections: int) -> ServedRecord:
        """The record, at ``time_s``, the user key hashed under ``salt``, at most
        ``max_rejections`` per-candidate rejections kept."""
        return build_record(
            self.decision, self.request, time_s, salt, pacing=self.pacing,
            exploration=self.exploration, propensities=self.propensities,
            model_version=self.model_version, max_rejections=max_rejections,
            multipliers=self.multipliers, supply_chain=self.supply_chain)


def decision_source(
    decision: Decision,
    request: SelectRequest,
    *,
    pacing_rate: Callable[[int], float] | None = None,
    exploration: bool | None = None,
    propensities: Mapping[str, float] | None = None,
    model_version: str | None = None,
    bid_multiplier: Callable[[int], float] | None = None,
    supply_chain: str | None = None,
) -> DecisionSource:
    """What :meth:`ServedLog.record <adfunnel.events.served_log.ServedLog.record>` queues
    for ``decision`` (made for ``request``); O(winners), on the request path.

    ``pacing_rate``: campaign id -> participation probability now (e.g. the spend gate's
    ``pacing_rate``), read here for each winner; ``propensities``: slot id ->
    propensity; ``exploration``, ``model_version``: stored as given;
    ``bid_multiplier``: campaign id -> λ now (the spend gate's ``bid_multiplier``),
    read for each winner of an automatic campaign; ``supply_chain``: an OpenRTB
    request's ``source.schain`` (JSON text), stored as given. Do not mutate the decision or the
    request afterwards: the writer thread reads them later.
    """
    pacing = ({p.campaign.id: float(pacing_rate(p.campaign.id)) for p in decision.placed}
              if pacing_rate is not None else None)
    lams = ({p.campaign.id: float(bid_multiplier(p.campaign.id)) for p in decision.placed
             if automatic(p.campaign)} if bid_multiplier is not None else None)
    return DecisionSource(decision, request, pacing, exploration, propensities, model_version,
                          lams, supply_chain)


def build_record(
    decision: Decision,
    request: SelectRequest,
    time_s: float,
    salt: bytes,
    *,
    pacing: Mapping[int, float] | None = None,
    exploration: bool | None = None,
    propensities: Mapping[str, float] | None = None,
    model_version: str | None = None,
    max_rejections: int = DEFAULT_MAX_REJECTIONS,
    multipliers: Mapping[int, float] | None = None,
    supply_chain: str | None = None,
) -> ServedRecord:
    """The :class:`ServedRecord` of ``decision`` made for ``request`` at ``time_s``.

    ``pacing``: campaign id -> pacing probability at decision time; ``propensities``:
    slot id -> propensity of the ad shown there; ``multipliers``: campaign id -> λ of
    the automatic campaigns at decision time. An OpenRTB winner's price is the bid we
    sent (``decision.bids``, CPM micros) with its auction type (``openrtb_at``). Pure:
    reads its arguments only.
    """
    positions = {s.id: s.position for s in request.slots}
    factor, scored = decision.calibration_factor, decision.model_scored
    pacing = pacing or {}
    propensities = propensities or {}
    multipliers = multipliers or {}
    winners = []
    for p in decision.placed:
        cand = p.win.candidate
        winners.append(WinnerRecord(
            slot_id=p.win.slot_id,
            position=positions.get(p.win.slot_id, 0),
            impression_id=p.served.impression_id,
            ad_id=p.ad.id,
            campaign_id=p.campaign.id,
            advertiser_id=p.campaign.advertiser_id,
            bid_type=p.campaign.bid_type.value,
            bid_micros=cand.bid_micros,
            price_micros=decision.bids.get(p.win.slot_id, p.win.price_micros),
            charge_micros=p.charge_micros,
            expected_micros=p.served.expected_micros,
            pctr=float(cand.pctr),
            pcvr=float(cand.pcvr),
            quality_micros=float(cand.quality_micros),
            total_micros=float(cand.total),
            pacing_p=pacing.get(p.campaign.id),
            propensity=propensities.get(p.win.slot_id),
            tier=p.tier,
            model_pctr=(float(cand.pctr) / factor if factor and scored is not None
                        and p.ad.id in scored else None),
            bid_multiplier=multipliers.get(p.campaign.id),
            beat_micros=decision.beats.get(p.win.slot_id),
            unshaded_bid_micros=decision.unshaded.get(p.win.slot_id),
            openrtb_at=decision.openrtb_at if p.win.slot_id in decision.bids else None,
        ))
    kept = decision.rejections[:max_rejections]
    return ServedRecord(
        request_id=decision.request_id,
        time=time_s,
        user_hash=hash_user_key(request.user.key, salt),
        attributes={k: _as_list(v) for k, v in request.user.attributes.items()},
        placement=request.placement.id,
        exchange=request.placement.exchange,
        domain=request.placement.domain,
        placement_reserve_cpm_micros=request.placement.reserve_cpm_micros,
        slots=[SlotRecord(s.id, s.position, s.width, s.height, s.format, s.reserve_cpm_micros)
               for s in request.slots],
        winners=winners,
        house_slots=[h.slot_id for h in decision.house],
        reason_counts=decision.rejection_counts(),
        rejections=[RejectionRecord(r.ad_id, r.campaign_id, r.reason, r.detail) for r in kept],
        rejections_total=len(decision.rejections),
        truncated=decision.truncated,
        index_version=decision.index_version,
        exploration=exploration,
        model_version=model_version,
        supply_chain=supply_chain,
    )


def _as_list(value: object) -> list[str]:
    if isinstance(value, list):
        return [str(v) for v in value]
    return [str(value)]
