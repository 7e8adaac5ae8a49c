"""Scenarios of the flight simulation (``adfunnel simulate --scenario flight``): a week of
requests shaped like the iPinYou log's hours, and the lines sold on it.

Each scenario is data; :mod:`adfunnel.sim.flight` runs it through a real embedded
server and :mod:`adfunnel.sim.flight_report` judges it. Money in micros; a line's
flight is given as day indices into the scenario's week (0 = its first local day).
Guaranteed goals are set from the matching supply the simulation generates (a
fraction of it), so "a goal that needs a third of its supply" holds for any seed.

Volumes: 6,000 requests a day; about 37 % of them are the direct lines' (their goals
and share), the rest the auction's, whose paced budgets (about $24 a day at $11-13
CPM bids) buy most of it and leave the fillers the remainder.

Request model (stated, the simulation's own): every request carries a placement, a
device type and interests drawn independently with the weights below; requests per
local hour follow the iPinYou 2259 hour-of-day shape (:mod:`adfunnel.sim.traffic`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date
from typing import Any

USD = 1_000_000

#: Placement ids and their share of the requests.
PLACEMENTS: tuple[tuple[str, float], ...] = (
    ("home", 0.15), ("news", 0.40), ("sports", 0.30), ("video", 0.15))
#: Device types and their share.
DEVICES: tuple[tuple[str, float], ...] = (("mobile", 0.55), ("desktop", 0.37), ("tablet", 0.08))
#: Interests, each held independently with its probability (a request may hold several).
INTERESTS: tuple[tuple[str, float], ...] = (
    ("cars", 0.12), ("travel", 0.20), ("finance", 0.15), ("sailing", 0.004))


@dataclass(frozen=True)
class GoalEdit:
    """The line's goal set to ``factor`` × its original goal at local ``hour`` of day
    index ``day`` (an operator's mid-flight raise)."""

    day: int
    hour: int
    factor: float


@dataclass(frozen=True)
class Line:
    """One campaign of the scenario.

    ``kind``: ``guaranteed`` | ``sponsorship`` | ``flight`` (auction, one budget over the
    flight) | ``average_day`` (auction) | ``auction`` (auction, daily budget).
    ``goal_of_supply``: a guaranteed line's impression goal as a fraction of the matching
    requests the simulation generated over its flight (> 1: more than traffic can
    give). ``direct``: a sponsorship or guaranteed line (left out of the comparison run).
    """

    key: str
    kind: str
    bid_micros: int  # CPM: the contract rate of direct lines, the bid of auction ones
    targeting: dict[str, Any] | None = None
    days: tuple[int, int] = (0, 6)  # first, last day index (inclusive)
    goal_of_supply: float | None = None
    share: float | None = None
    budget_micros: int | None = None  # flight budget (flight), daily budget (others)
    pacing: str = "even"
    edits: tuple[GoalEdit, ...] = ()
    judged: bool = True  # its targets are judged (the main lines and the faults)
    note: str = ""

    @property
    def direct(self) -> bool:
        return self.kind in ("guaranteed", "sponsorship")


@dataclass(frozen=True)
class FlightScenario:
    name: str
    first_day: date
    days: int
    time_zone: str
    lines: tuple[Line, ...]
    #: requests per day at the shape's mean (the full run; ``short`` scales it)
    requests_per_day: int = 6_000
    short_requests_per_day: int = 800
    #: seconds between moves of the manual clock (the requests between two moves are
    #: decided at the first): full run, short run
    tick_s: float = 60.0
    short_tick_s: float = 120.0
    render_rate: float = 0.97
    notes: str = field(default="")


def _news() -> dict[str, Any]:
    return {"attr": "placement", "in": ["news"]}


#: Berlin leaves summer time on Sunday 2026-10-25 (a 25-hour local day), inside the week.
WEEK = date(2026, 10, 21)


def _main_lines() -> tuple[Line, ...]:
    return (
        Line("guaranteed", "guaranteed", 8 * USD, _news(), goal_of_supply=1 / 3,
             note="news placement, goal = 1/3 of its matching supply, $8 CPM"),
        Line("sponsorship", "sponsorship", 15 * USD, {"attr": "placement", "in": ["home"]},
             days=(2, 3), share=0.5, note="home placement, share 0.5 for two days"),
        # the period campaigns bid highest in the auction, so that traffic allows their
        # budgets (what is judged is the period's limit, not who wins the auction)
        Line("flight-budget", "flight", 13 * USD, budget_micros=35 * USD,
             note="auction, one $35 budget over the week, bids $13 CPM"),
        Line("average-daily", "average_day", 12_500_000, budget_micros=5 * USD,
             note="auction, $5 average daily budget, bids $12.50 CPM"),
        Line("auction-a", "auction", 12 * USD, budget_micros=8 * USD, judged=False,
             note="bids above the guaranteed rate, $8 a day"),
        Line("auction-b", "auction", 11 * USD, budget_micros=6 * USD, judged=False,
             note="bids above the guaranteed rate, $6 a day"),
        Line("filler-a", "auction", 3 * USD, budget_micros=10_000 * USD,
             pacing="accelerated", judged=False,
             note="takes what no one else does (budget never binds)"),
        Line("filler-b", "auction", 2_500_000, budget_micros=10_000 * USD,
             pacing="accelerated", judged=False,
             note="the fillers' runner-up: filler-a pays its price"),
    )


def _fault_lines() -> tuple[Line, ...]:
    return (
        Line("goal-raised", "guaranteed", 7 * USD, {"attr": "placement", "in": ["video"]},
             goal_of_supply=0.2, edits=(GoalEdit(1, 12, 1.6),),
             note="video, goal 20 % of supply raised x1.6 at 12:00 on day 2"),
        Line("dst-end", "guaranteed", 7 * USD, {"attr": "device_type", "in": ["tablet"]},
             days=(0, 4), goal_of_supply=1 / 3,
             note="tablets, flight ends on 2026-10-25 (25 h, DST ends)"),
        Line("short-supply", "guaranteed", 7 * USD, {"attr": "interests", "in": ["sailing"]},
             goal_of_supply=2.0, note="sailing fans, goal twice the matching supply"),
        Line("nested-broad", "guaranteed", 7 * USD, {"attr": "placement", "in": ["sports"]},
             goal_of_supply=0.4, note="sports, goal 40 % of supply"),
        Line("nested-narrow", "guaranteed", 7 * USD, {"all": [
            {"attr": "placement", "in": ["sports"]}, {"attr": "interests", "in": ["cars"]}]},
            goal_of_supply=0.6, note="sports x cars (inside nested-broad), goal 60 %"),
    )


def flight_scenarios() -> dict[str, FlightScenario]:
    """Every named flight scenario."""
    tz = "Europe/Berlin"
    out = [
        FlightScenario(
            "flight", WEEK, 7, tz, (*_main_lines(), *_fault_lines()),
            notes="a week in Berlin (summer time ends on day 5); the main lines and the "
                  "faults: a goal raised mid-flight, a flight ending on the DST day, a goal "
                  "traffic cannot meet, nested guaranteed lines"),
    ]
    return {s.name: s for s in out}
