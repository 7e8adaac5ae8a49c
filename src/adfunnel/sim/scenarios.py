"""Scenarios of the day simulation: campaigns, traffic, events and the short forms.

Each scenario is data; ``adfunnel.sim.day`` runs any of them. Money in micros, times
as local wall-clock ``(hour, minute)`` of the campaign named, or UTC datetimes.
Volumes are scaled (tens of thousands of serves per campaign per day, high prices)
so that a full day runs in about a minute of CPU; budgets are the named ones.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime

from adfunnel.campaigns.model import BidStrategy, BidType, PacingMode
from adfunnel.sim.traffic import ipinyou_hourly, normalised

USD = 1_000_000


@dataclass(frozen=True)
class SimCampaign:
    """A campaign and the traffic it can reach.

    ``potential``: spend at p = 1 over the day as a multiple of the budget (> 1: budget
    limited; < 1: limited by bid or audience). ``win``: share of participating requests
    it wins. ``history``: hourly shape of its last 7 days (None = the iPinYou shape).
    ``traffic``: local (hour, minute) -> multiplier of its real traffic over the
    history shape (viral, dead hour).

    ``landscape``: its auctions are real ones (:mod:`adfunnel.sim.landscape`): each
    eligible request draws a pCTR and a competing price, the campaign bids pCTR × its
    bid per click (⌊v ÷ λ⌋ for an automatic ``strategy``) and pays the competing price
    per click; ``requests_per_day`` then sets its eligible traffic (``potential``,
    ``win``, ``price_frac`` and ``pctr`` are not used).
    """

    id: int
    time_zone: str
    bid_type: BidType
    bid_micros: int
    budget_micros: int
    potential: float
    win: float = 0.5
    price_frac: tuple[float, float] = (0.5, 0.9)
    pctr: float = 0.05
    pcvr: float = 0.2
    pacing: PacingMode = PacingMode.EVEN
    history: tuple[float, ...] | None = None
    traffic: Callable[[int, int], float] | None = None
    forced: tuple[tuple[int, int, int], ...] = ()  # (hour, minute, serves) on server 0
    strategy: BidStrategy = BidStrategy.MANUAL
    landscape: bool = False
    requests_per_day: float = 0.0


@dataclass(frozen=True)
class BudgetEdit:
    campaign_id: int
    local_hm: tuple[int, int]
    new_budget_micros: int


@dataclass(frozen=True)
class Pause:
    """The advertiser pauses ``campaign_id`` at local ``local_hm`` (and resumes it at
    ``resume_hm``, if given). The edit reaches the budget service and every ad server's
    campaign store through the change log."""

    campaign_id: int
    local_hm: tuple[int, int]
    resume_hm: tuple[int, int] | None = None


@dataclass(frozen=True)
class Restart:
    """The process of budget shard ``shard`` is replaced by a fresh one at local
    ``local_hm`` in ``time_zone`` on the scenario's day: no memory of spend, slices,
    rates or p; it relearns from the billed feed and the servers' reports."""

    shard: int
    local_hm: tuple[int, int]
    time_zone: str


@dataclass(frozen=True)
class Scenario:
    name: str
    day: date
    campaigns: tuple[SimCampaign, ...]
    servers: int = 3
    shards: int = 2
    report_interval_s: float = 1.0
    control_interval_s: float = 10.0
    billing_interval_s: float = 10.0
    billing_lag_s: tuple[float, float] = (2.0, 15.0)
    click_delay_mean_s: float = 20.0
    click_window_s: float = 120.0
    #: clicks of CPC serves arrive uniformly this many seconds after the serve instead
    #: (late clicks: the expected cost must stay committed until they can no longer bill)
    click_delay_range_s: tuple[float, float] | None = None
    conversion_delay_mean_s: float = 90.0
    conversion_window_s: float = 600.0
    message_delay_s: tuple[float, float] = (0.002, 0.040)
    edits: tuple[BudgetEdit, ...] = ()
    pauses: tuple[Pause, ...] = ()
    change_delay_s: tuple[float, float] = (0.05, 0.5)  # change log -> ad server store
    outages: tuple[tuple[int, datetime, float], ...] = ()  # (shard, start UTC, seconds)
    crash_server_after: datetime | None = None  # kill server 1 once it holds slices after
    restart: Restart | None = None
    short_window: tuple[datetime, datetime] | None = None
    notes: str = field(default="")


def _shape() -> tuple[float, ...]:
    return normalised(ipinyou_hourly())


D = date(2026, 10, 20)


def _base() -> tuple[SimCampaign, ...]:
    return (
        SimCampaign(1, "Europe/Berlin", BidType.CPM, 400 * USD, 10_000 * USD, 2.5),
        SimCampaign(2, "America/New_York", BidType.CPC, 8 * USD, 10_000 * USD, 3.0,
                    pctr=0.04),
        SimCampaign(3, "America/Sao_Paulo", BidType.CPA, 30 * USD, 5_000 * USD, 2.0,
                    pctr=0.06, pcvr=0.2),
        SimCampaign(4, "America/New_York", BidType.CPM, 300 * USD, 3_000 * USD, 0.6),
        SimCampaign(5, "Europe/Berlin", BidType.CPC, 5 * USD, 4_000 * USD, 1.6, pctr=0.05),
        SimCampaign(6, "America/Sao_Paulo", BidType.CPM, 250 * USD, 2_000 * USD, 3.0,
                    pacing=PacingMode.ACCELERATED),
        SimCampaign(7, "Europe/London", BidType.CPC, 6 * USD, 6_000 * USD, 0.8, pctr=0.05),
    )


def _u(y: int, mo: int, d: int, h: int, mi: int = 0) -> datetime:
    return datetime(y, mo, d, h, mi, tzinfo=UTC)


def _viral(h: int, m: int) -> float:
    return 30.0 if (h, m) >= (9, 5) else 1.0


def _dead_history() -> tuple[float, ...]:
    s = list(_shape())
    s[0] = 0.002
    return tuple(s)


def _dead_traffic(h: int, m: int) -> float:
    return 0.0 if h == 0 else 1.0


def _evening() -> tuple[float, ...]:
    base = [1.0] * 24
    for h in range(18, 22):
        base[h] = 3.0
    for h in (22, 23):
        base[h] = 0.2
    rest = [h for h in range(24) if h < 18]
    # keep the mean at 1: 4×3 + 2×0.2 = 12.4 over 6 hours; 18 other hours share 11.6
    for h in rest:
        base[h] = 11.6 / len(rest)
    return tuple(base)


def _front_loaded(share: float = 0.9, hour: int = 14) -> tuple[float, ...]:
    """The iPinYou shape with the hours before ``hour`` scaled so that ``share`` of the
    day's traffic (and so of a curve shaped like it) comes before ``hour``:00."""
    s = _shape()
    before, after = sum(s[:hour]), sum(s[hour:])
    k = share * after / ((1.0 - share) * before)
    return tuple(v * k if h < hour else v for h, v in enumerate(s))


def _restart_campaigns() -> tuple[SimCampaign, ...]:
    """Berlin campaigns on shard 0 (even ids) that have spent ~90 % by 14:00 Berlin."""
    early = _front_loaded()
    return (
        SimCampaign(80, "Europe/Berlin", BidType.CPC, 4 * USD, 4_000 * USD, 2.0, pctr=0.05,
                    history=early),
        SimCampaign(82, "Europe/Berlin", BidType.CPA, 30 * USD, 3_000 * USD, 2.0, pctr=0.06,
                    pcvr=0.2, history=early),
        SimCampaign(84, "Europe/Berlin", BidType.CPM, 300 * USD, 3_000 * USD, 1.04,
                    pacing=PacingMode.ACCELERATED, history=early),
        SimCampaign(86, "Europe/Berlin", BidType.CPC, 2 * USD, 20 * USD, 40.0,
                    price_frac=(1.0, 1.0), pctr=0.05, history=early),
    )


def _small() -> SimCampaign:
    return SimCampaign(20, "Europe/Berlin", BidType.CPC, 2 * USD, 20 * USD, 40.0,
                       price_frac=(1.0, 1.0), pctr=0.05)


def scenarios() -> dict[str, Scenario]:
    """Every named scenario."""
    base = _base()
    b = {c.id: c for c in base}
    out = [
        Scenario("baseline", D, base,
                 short_window=(_u(2026, 10, 20, 10), _u(2026, 10, 20, 10, 30))),
        Scenario("viral", D, (replace(b[1], traffic=_viral), *base[1:]),
                 short_window=(_u(2026, 10, 20, 6, 55), _u(2026, 10, 20, 7, 30)),
                 notes="campaign 1 eligible traffic x30 from 09:05 Berlin"),
        Scenario("budget-raise", D, base,
                 edits=(BudgetEdit(2, (14, 0), 15_000 * USD),),
                 short_window=(_u(2026, 10, 20, 17, 45), _u(2026, 10, 20, 18, 20)),
                 notes="campaign 2 $10,000 -> $15,000 at 14:00 New York"),
        Scenario("budget-cut", D, base,
                 edits=(BudgetEdit(1, (13, 0), 6_000 * USD),),
                 short_window=(_u(2026, 10, 20, 10, 45), _u(2026, 10, 20, 11, 20)),
                 notes="campaign 1 budget -40 % at 13:00 Berlin"),
        Scenario("shard-outage", D, (*base, _small()),
                 outages=((0, _u(2026, 10, 20, 10), 20.0), (0, _u(2026, 10, 20, 10, 30), 90.0)),
                 short_window=(_u(2026, 10, 20, 9, 58), _u(2026, 10, 20, 10, 35)),
                 notes="shard 0 down 20 s at 10:00Z and 90 s at 10:30Z"),
        Scenario("server-crash", D, (*base, _small()),
                 crash_server_after=_u(2026, 10, 20, 8, 0),
                 short_window=(_u(2026, 10, 20, 7, 58), _u(2026, 10, 20, 8, 25)),
                 notes="server 1 killed the first time it holds slices after 08:00Z"),
        Scenario("dead-hour", D, (replace(b[5], history=_dead_history(), traffic=_dead_traffic,
                                          forced=((0, 5, 3),)), *[c for c in base if c.id != 5]),
                 short_window=(_u(2026, 10, 19, 21, 55), _u(2026, 10, 19, 22, 40)),
                 notes="campaign 5: almost no traffic 00:00-01:00 Berlin, 3 serves at 00:05"),
        Scenario("small-budget", D, (*base, _small()),
                 short_window=(_u(2026, 10, 20, 6), _u(2026, 10, 20, 6, 40)),
                 notes="campaign 20: $20 budget, $2 clicks, every server"),
        Scenario("pause", D, base,
                 pauses=(Pause(5, (15, 0), (15, 30)), Pause(2, (20, 0))),
                 short_window=(_u(2026, 10, 20, 12, 55), _u(2026, 10, 20, 13, 40)),
                 notes="campaign 5 paused 15:00-15:30 Berlin; campaign 2 paused for good "
                       "at 20:00 New York"),
        Scenario("late-clicks", D, (
            SimCampaign(70, "Europe/Berlin", BidType.CPC, 4 * USD, 300 * USD, 40.0,
                        pacing=PacingMode.ACCELERATED, pctr=0.05),
            SimCampaign(71, "Europe/Berlin", BidType.CPC, 5 * USD, 4_000 * USD, 1.6,
                        pctr=0.05),
            base[0],
        ), click_delay_range_s=(600.0, 3000.0),
            short_window=(_u(2026, 10, 20, 9, 50), _u(2026, 10, 20, 11, 20)),
            notes="CPC clicks arrive 10-50 min after the serve; campaign 70 is "
                  "accelerated at 40x the traffic its budget buys, so it exhausts while "
                  "most of its clicks are still to come"),
        Scenario("exhaustion", D, (
            SimCampaign(60, "Europe/Berlin", BidType.CPM, 250 * USD, 200 * USD, 40.0,
                        pacing=PacingMode.ACCELERATED),
            SimCampaign(61, "Europe/Berlin", BidType.CPC, 4 * USD, 300 * USD, 40.0,
                        pacing=PacingMode.ACCELERATED, pctr=0.05),
            *base[:2],
        ), short_window=(_u(2026, 10, 20, 9, 50), _u(2026, 10, 20, 10, 45)),
            notes="campaigns 60 (CPM) and 61 (CPC): accelerated, 40x the traffic their "
                  "budget buys: exhausted within minutes of the window"),
        Scenario("midnight", date(2026, 11, 1), (
            SimCampaign(31, "America/Sao_Paulo", BidType.CPM, 400 * USD, 5_000 * USD, 2.0),
            SimCampaign(32, "America/New_York", BidType.CPC, 8 * USD, 8_000 * USD, 2.5,
                        pctr=0.04),
            SimCampaign(33, "Europe/Berlin", BidType.CPM, 300 * USD, 3_000 * USD, 2.0),
        ), short_window=(_u(2026, 11, 1, 2, 45), _u(2026, 11, 1, 3, 20)),
            notes="Sao Paulo resets at 03:00Z; New York's 2026-11-01 has 25 hours"),
        Scenario("evening-peak", D, (
            SimCampaign(41, "America/New_York", BidType.CPM, 400 * USD, 6_000 * USD, 2.0,
                        history=_evening()),
            *base[1:3],
        ), short_window=(_u(2026, 10, 21, 1, 45), _u(2026, 10, 21, 2, 20)),
            notes="campaign 41: evening 3x average, 0.2x after 22:00 New York"),
        Scenario("service-restart", D, (*_restart_campaigns(), b[1], b[5]),
                 restart=Restart(0, (14, 0), "Europe/Berlin"),
                 short_window=(_u(2026, 10, 20, 11, 50), _u(2026, 10, 20, 12, 25)),
                 notes="budget shard 0 (campaigns 80-86, ~90 % of their budgets spent) "
                       "replaced by a fresh process at 14:00 Berlin"),
    ]
    return {s.name: s for s in out}
