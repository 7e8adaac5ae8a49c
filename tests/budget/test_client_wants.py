"""A report asks slices for exactly the campaigns a scan of every demand would name.

The client looks only at campaigns whose want may have changed since the last report
(``_asking``); this property test drives it through random admits, serves, replies,
slice expiries and silences, and compares each report's wants with the scan.
"""

from __future__ import annotations

from datetime import UTC, date, datetime

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adfunnel.budget.client import BudgetClient
from adfunnel.budget.client_slices import DEMAND_MEMORY_S
from adfunnel.budget.gate import Served
from adfunnel.budget.protocol import Directive, Reply, Report, SliceGrant
from adfunnel.budget.slices import BudgetState
from adfunnel.campaigns.model import BidType, Campaign, Objective
from adfunnel.campaigns.schedule import local_day
from adfunnel.clock import ManualClock

START = datetime(2026, 11, 1, 3, 50, tzinfo=UTC)  # New York's midnight is near
ZONES = ["UTC", "America/New_York"]
CIDS = range(1, 4)
STATES = ["open", "metered", "exhausted", "stopped"]


class _Quiet:
    def send_report(self, report: Report, on_reply: object) -> None:
        return None


def _campaign(cid: int) -> Campaign:
    return Campaign(cid, 1, "c", Objective.CLICKS, BidType.CPC, 1_000, 10**9,
                    ZONES[cid % 2], date(2026, 1, 1))


def _scan(client: BudgetClient, now: float) -> set[int]:
    """The wants a scan of every demand names (the rule before ``_asking``)."""
    out = set(client._wants)
    for cid in client._demand.ids():
        demand = client._demand.get(cid)
        assert demand is not None
        at, charge, day = demand
        if now - at > DEMAND_MEMORY_S:
            continue
        if (client._effective_state(cid, day, now) is BudgetState.METERED
                and client._slice_with_room(cid, day, now, charge) is None):
            out.add(cid)
    return out


cids = st.sampled_from(list(CIDS))
charges = st.sampled_from([500, 1_000, 2_000])
steps = st.one_of(
    st.tuples(st.just("wait"), st.sampled_from([1, 5, 31, 70, 400, 700])),
    st.tuples(st.just("admit"), cids, charges),
    st.tuples(st.just("bulk"), st.lists(cids, min_size=1, max_size=6, unique=True), charges),
    st.tuples(st.just("serve"), cids, charges),
    st.tuples(st.just("reply"), st.lists(st.tuples(cids, st.sampled_from(STATES)), max_size=4),
              st.lists(st.tuples(cids, st.sampled_from([500, 1_500, 5_000]),
                                 st.sampled_from([5, 30])), max_size=3)),
    st.tuples(st.just("report")),
)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(st.lists(steps, min_size=1, max_size=40))
def test_report_wants_equal_a_scan_of_every_demand(script: list[tuple]) -> None:
    clock = ManualClock(START)
    client = BudgetClient("s", clock, _Quiet())
    camps = {cid: _campaign(cid) for cid in CIDS}
    n = 0
    for step in script:
        now = clock.now()
        t = now.timestamp()
        day = {cid: local_day(now, c.time_zone) for cid, c in camps.items()}
        kind = step[0]
        if kind == "wait":
            clock.advance(step[1])
        elif kind == "admit":
            client.admit(camps[step[1]], now, step[2])
        elif kind == "bulk":
            ids = np.array(step[1], dtype=np.int64)
            client.bulk_admit(ids, np.array([day[c].toordinal() for c in step[1]], np.int32),
                              np.full(len(ids), step[2], np.int64),
                              np.full((len(ids), 2), 10**9, np.int64), t)
        elif kind == "serve":
            n += 1
            client.record_served(Served(step[1], day[step[1]], f"i{n}", step[2], t + 60,
                                        step[2]))
        elif kind == "reply":
            n += 1
            client.handle_reply(Reply(
                0, t, -1, [Directive(c, s, 1.0, day[c].isoformat()) for c, s in step[1]],
                [SliceGrant(f"g{n}-{k}", c, day[c].isoformat(), amount, t + ttl)
                 for k, (c, amount, ttl) in enumerate(step[2])], "e", version=n))
        else:
            want = _scan(client, t)
            [report] = client.build_reports(t)
            assert set(report.wants) == want


def test_a_slice_that_expires_is_asked_for_again() -> None:
    test_report_wants_equal_a_scan_of_every_demand.hypothesis.inner_test([
        ("admit", 1, 1_000), ("reply", [], [(1, 5_000, 30)]), ("report",), ("wait", 31),
        ("report",)])
