"""The flight simulation's requests and its own count of each line's matching supply.

Requests: per local hour of the scenario's week, Poisson with mean ``per_day / 24 ×``
the iPinYou 2259 hour-of-day shape (mean 1) at that local hour, at uniform instants
within it; attributes drawn as :mod:`adfunnel.sim.flight_scenarios` states. A 25-hour
local day (summer time ends) has 25 hours of requests; a 23-hour one 23.

Matching supply is counted HERE, by the simulation's own evaluation of each request
against a line's targeting (the JSON ``all``/``any``/``not``/``in``/``not_in`` forms),
flight (local dates, both ends inclusive) and dayparts — never through the server's
index, compiled expressions or schedule code, so a server bug in any of them shows up
as a gap between what a line was served and what it could have been.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import numpy as np

from adfunnel.sim.flight_scenarios import DEVICES, INTERESTS, PLACEMENTS, FlightScenario, Line

# the simulation's own reading of targeting, shared with the day simulation's potential
# (never the server's index)
from adfunnel.sim.potential import matches
from adfunnel.sim.traffic import ipinyou_hourly, normalised


@dataclass(frozen=True, slots=True)
class Req:
    """One ad request of the simulation: Unix time, local day and hour, attributes."""

    t: float
    day: date
    hour: int
    placement: str
    device: str
    interests: tuple[str, ...]
    user: str

    def attrs(self) -> dict[str, frozenset[str]]:
        """Attribute -> values, as the simulation's own matcher reads them."""
        return {"placement": frozenset((self.placement,)),
                "device_type": frozenset((self.device,)),
                "interests": frozenset(self.interests)}


def local_hours(day: date, tz: str) -> list[tuple[float, int]]:
    """(UTC start, local hour) of every hour of local ``day`` in ``tz`` (23-25 of them),
    by stepping UTC hours from local midnight (the simulation's own calendar)."""
    z = ZoneInfo(tz)
    start = datetime(day.year, day.month, day.day, tzinfo=z).astimezone(UTC)
    nxt = day + timedelta(days=1)
    end = datetime(nxt.year, nxt.month, nxt.day, tzinfo=z).astimezone(UTC)
    out = []
    t = start
    while t < end:
        out.append((t.timestamp(), t.astimezone(z).hour))
        t += timedelta(hours=1)
    return out


def generate(sc: FlightScenario, seed: int, per_day: int) -> list[Req]:
    """The week's requests in time order; deterministic in ``seed``."""
    rng = np.random.default_rng(seed)
    shape = normalised(ipinyou_hourly())
    pl_names = [p for p, _ in PLACEMENTS]
    pl_w = np.array([w for _, w in PLACEMENTS])
    dev_names = [d for d, _ in DEVICES]
    dev_w = np.array([w for _, w in DEVICES])
    out: list[Req] = []
    n_user = 0
    for i in range(sc.days):
        day = sc.first_day + timedelta(days=i)
        for t0, hour in local_hours(day, sc.time_zone):
            n = int(rng.poisson(per_day / 24.0 * shape[hour]))
            if n == 0:
                continue
            ts = np.sort(t0 + rng.uniform(0.0, 3600.0, n))
            pls = rng.choice(len(pl_names), n, p=pl_w / pl_w.sum())
            devs = rng.choice(len(dev_names), n, p=dev_w / dev_w.sum())
            held = rng.random((n, len(INTERESTS)))
            for k in range(n):
                ints = tuple(name for j, (name, pr) in enumerate(INTERESTS) if held[k, j] < pr)
                out.append(Req(float(ts[k]), day, hour, pl_names[int(pls[k])],
                               dev_names[int(devs[k])], ints, f"u{n_user}"))
                n_user += 1
    return out


def line_days(sc: FlightScenario, line: Line) -> tuple[date, date]:
    """First and last local day of ``line``'s flight."""
    return (sc.first_day + timedelta(days=line.days[0]),
            sc.first_day + timedelta(days=line.days[1]))


def line_matches(sc: FlightScenario, line: Line, req: Req) -> bool:
    """``req`` is in ``line``'s flight and matches its targeting (it has no dayparts)."""
    first, last = line_days(sc, line)
    return first <= req.day <= last and matches(line.targeting, req.attrs())


def supply_by_day(sc: FlightScenario, lines: tuple[Line, ...], reqs: list[Req]
                  ) -> dict[str, dict[date, int]]:
    """line key -> local day -> matching requests, counted by the simulation."""
    out: dict[str, dict[date, int]] = {ln.key: {} for ln in lines}
    for r in reqs:
        for ln in lines:
            if line_matches(sc, ln, r):
                d = out[ln.key]
                d[r.day] = d.get(r.day, 0) + 1
    return out
