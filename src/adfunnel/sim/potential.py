"""What each replay campaign could spend on each of its local days at pacing rate p = 1:
the replay's own model of the log rows it could win, independent of the server.

The replay judges delivery by this figure, not by the server's refusal counter: a day
whose potential reaches the daily budget is a day on which an unthrottled campaign would
have spent its budget, so a good pacer delivers (nearly) all of it. The model, stated:

- **Eligible**: the campaign's targeting expression matches the row's ad request
  (evaluated here, over the attributes the replay sends plus ``slot_size`` and
  ``exchange``), it has an ad of the slot's size, and its eCPM clears the row's floor.
  eCPM is the CPM bid, or for CPC the bid × the server's prior click rate × 1000 (what a
  new ad is ranked by; the server's learned rates are not modelled).
- **Could win**: every row it is eligible for. A rival that outranks it may be paced,
  spent or ranked lower by the server's learned click rates, so any such row can be
  won; the potential is what the campaign would spend at p = 1 if it won them all, never
  capped by its budget (an upper bound on what competition leaves it).
- **Charge**: the second price it would pay there — the eCPM of the next eligible
  campaign ranked below it, or the floor — capped at the bid, per rendered impression
  (CPM, ÷ 1000) or per expected click (CPC, the replay's click model); times the
  replay's render rate. Money is exact (``Fraction``) until the day's total is rounded
  down to whole micros.

Frequency caps and the server's tie rotation are not modelled (the log's users hardly
repeat; ties of eCPM between the nine do not occur at their real bids).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any
from zoneinfo import ZoneInfo

from adfunnel.money import MICROS_PER_FEN
from adfunnel.sim.ipinyou import LogRow, split_useragent

MILLE = 1000


@dataclass(frozen=True, slots=True)
class Bidder:
    """One campaign as the model sees it (money in micros; ``click_rate`` the replay's
    click probability of a rendered ad; ``prior_ctr`` the server's prior click rate)."""

    campaign_id: int
    bid_type: str  # "CPM" or "CPC"
    bid_micros: int
    daily_budget_micros: int
    targeting: Mapping[str, Any] | None
    sizes: frozenset[str]
    time_zone: str
    click_rate: float
    prior_ctr: float

    def ecpm(self) -> Fraction:
        """Expected micros per thousand impressions at the prior."""
        if self.bid_type == "CPM":
            return Fraction(self.bid_micros)
        return Fraction(self.bid_micros) * Fraction(self.prior_ctr) * MILLE

    def charge(self, price_ecpm: Fraction, render_rate: float) -> Fraction:
        """Expected micros billed for one won row at second price ``price_ecpm``
        (at most its eCPM: the price is capped at the bid)."""
        if self.bid_type == "CPM":
            return Fraction(render_rate) * min(price_ecpm, self.ecpm()) / MILLE
        per_click = min(price_ecpm / (Fraction(self.prior_ctr) * MILLE),
                        Fraction(self.bid_micros))
        return Fraction(render_rate) * Fraction(self.click_rate) * per_click


def row_attributes(row: LogRow) -> dict[str, frozenset[str]]:
    """The targeting attributes of a row's ad request (those ``ad_request`` sends, and
    the slot size and exchange the server derives from the placement and slot)."""
    device, os_name, browser = split_useragent(row.useragent)
    attrs = {"geo.country": "CN", "geo.region": f"CN-{row.region}", "geo.city": row.city,
             "device_type": device, "os": os_name, "browser": browser,
             "slot_size": f"{row.width}x{row.height}", "exchange": row.exchange}
    out = {k: frozenset((v,)) for k, v in attrs.items()}
    if row.usertags:
        out["interests"] = frozenset(row.usertags)
    return out


def matches(expr: Mapping[str, Any] | None, attrs: Mapping[str, frozenset[str]]) -> bool:
    """Whether a targeting expression (``all``/``any``/``not``/``attr`` with ``in`` or
    ``not_in``) matches; None matches everything. ``in`` is true when any of the
    request's values is in the set, ``not_in`` when none is (also when it has none)."""
    if expr is None:
        return True
    if "all" in expr:
        return all(matches(e, attrs) for e in expr["all"])
    if "any" in expr:
        return any(matches(e, attrs) for e in expr["any"])
    if "not" in expr:
        return not matches(expr["not"], attrs)
    values = attrs.get(expr["attr"], frozenset())
    if "in" in expr:
        return not values.isdisjoint(expr["in"])
    return values.isdisjoint(expr["not_in"])


def potential_micros(rows: Sequence[LogRow], bidders: Sequence[Bidder],
                     render_rate: float) -> dict[int, dict[str, int]]:
    """Campaign id → local date (ISO) → its potential spend that day (micros, rounded
    down), for every day with a row it is eligible for (see the module docstring)."""
    totals: dict[int, dict[str, Fraction]] = {b.campaign_id: defaultdict(Fraction)
                                               for b in bidders}
    zones = {b.time_zone: ZoneInfo(b.time_zone) for b in bidders}
    ecpm = {b.campaign_id: b.ecpm() for b in bidders}
    # a won row's charge depends only on (bidder, price): the log has few distinct floors
    charges: dict[tuple[int, Fraction], Fraction] = {}
    for row in rows:
        ranked = _eligible(row, bidders, ecpm)
        if not ranked:
            continue
        days = {name: row.timestamp.astimezone(z).date().isoformat()
                for name, z in zones.items()}
        floor = Fraction(row.slot_price_fen * MICROS_PER_FEN)
        for i, b in enumerate(ranked):
            # won when every rival ranked above it is out of the auction (paced,
            # spent); it pays the next eCPM below it, or the floor
            price = (max(ecpm[ranked[i + 1].campaign_id], floor) if i + 1 < len(ranked)
                     else floor)
            key = (b.campaign_id, price)
            if key not in charges:
                charges[key] = b.charge(price, render_rate)
            totals[b.campaign_id][days[b.time_zone]] += charges[key]
    return {cid: {day: int(total) for day, total in sorted(by_day.items())}
            for cid, by_day in totals.items()}


def _eligible(row: LogRow, bidders: Iterable[Bidder], ecpm: Mapping[int, Fraction]
              ) -> list[Bidder]:
    """The row's eligible bidders, highest eCPM first."""
    attrs = row_attributes(row)
    floor = row.slot_price_fen * MICROS_PER_FEN
    size = f"{row.width}x{row.height}"
    found = [b for b in bidders
             if size in b.sizes and ecpm[b.campaign_id] >= floor
             and matches(b.targeting, attrs)]
    return sorted(found, key=lambda b: ecpm[b.campaign_id], reverse=True)


#: The share of a judged day's budget a campaign must bill, paced or accelerated.
DELIVERY_TARGET = 0.98


def judge_delivery(campaigns: list[dict[str, Any]], potential: Mapping[int, Mapping[str, int]]
                   ) -> dict[str, Any]:
    """Add ``potential_micros``, ``judged`` (potential ≥ budget) and ``delivery`` (billed
    ÷ budget) to every day of the report's ``campaigns`` (a judged day the server billed
    nothing on is added with 0 billed), and summarise: judged days, those that met
    :data:`DELIVERY_TARGET`, and every one that missed it."""
    judged = met = 0
    missed: list[dict[str, Any]] = []
    for c in campaigns:
        by_day = {d["date"]: d for d in c["days"]}
        for day, micros in potential.get(c["campaign_id"], {}).items():
            if day not in by_day and micros >= c["daily_budget_micros"]:
                by_day[day] = {"date": day, "budget_micros": c["daily_budget_micros"],
                               "billed_micros": 0, "absorbed_overspend_micros": 0,
                               "impressions": 0, "clicks": 0, "budget_bound": None}
        for day, d in sorted(by_day.items()):
            d["potential_micros"] = potential.get(c["campaign_id"], {}).get(day, 0)
            d["judged"] = d["potential_micros"] >= d["budget_micros"]
            d["delivery"] = round(d["billed_micros"] / d["budget_micros"], 4)
            if d["judged"]:
                judged += 1
                if d["billed_micros"] >= DELIVERY_TARGET * d["budget_micros"]:
                    met += 1
                else:
                    missed.append({"campaign_id": c["campaign_id"], "name": c["name"],
                                   "label": c.get("label", c["name"]),
                                   "pacing_mode": c["pacing_mode"], "date": day,
                                   "delivery": d["delivery"]})
        c["days"] = [by_day[day] for day in sorted(by_day)]
    return {"target": DELIVERY_TARGET, "judged_days": judged, "met_days": met,
            "missed": missed}
