"""The gates' bulk answers equal their one-campaign answers (the columnar decider's view)."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from adfunnel.budget.client import BudgetClient
from adfunnel.budget.gate import ADMIT, ASK, REFUSE, LocalSpendGate, Served
from adfunnel.budget.protocol import Directive, Reply, Report, SliceGrant
from adfunnel.campaigns.model import BidType, Campaign, Objective
from adfunnel.campaigns.schedule import local_day
from adfunnel.clock import ManualClock

NOW = datetime(2026, 11, 1, 4, 30, tzinfo=UTC)  # midnight has passed in London, not New York
ZONES = ["UTC", "America/New_York", "Europe/London"]
amounts = st.sampled_from([0, 1, 999, 1_000, 1_001, 2_000, 5_000])


def _campaign(cid: int, daily: int, lifetime: int | None, tz: str) -> Campaign:
    return Campaign(cid, 1, "c", Objective.CLICKS, BidType.CPC, 1_000, daily, tz,
                    date(2026, 1, 1), lifetime_budget_micros=lifetime)


def _arrays(cs: list[Campaign], charges: list[int]) -> tuple[np.ndarray, ...]:
    ids = np.array([c.id for c in cs], dtype=np.int64)
    days = np.array([local_day(NOW, c.time_zone).toordinal() for c in cs], dtype=np.int32)
    budgets = np.array([(c.daily_budget_micros, -1 if c.lifetime_budget_micros is None
                         else c.lifetime_budget_micros) for c in cs], dtype=np.int64)
    return ids, days, np.array(charges, dtype=np.int64), budgets


@pytest.mark.slow
@given(st.lists(st.tuples(amounts, st.one_of(st.none(), amounts), st.sampled_from(ZONES),
                          st.lists(st.tuples(amounts, st.booleans(), st.booleans()), max_size=3),
                          amounts), min_size=1, max_size=12))
def test_local_gate_bulk_equals_admit(rows) -> None:
    gate = LocalSpendGate()
    cs, charges = [], []
    for cid, (daily, lifetime, tz, spends, charge) in enumerate(rows, 1):
        c = _campaign(cid, daily, lifetime, tz)
        cs.append(c)
        charges.append(charge)
        day = local_day(NOW, tz)
        for n, (amount, billed, yesterday) in enumerate(spends):
            d = day - timedelta(days=1) if yesterday else day
            if billed:
                gate.record_billed(cid, d, amount, f"b{cid}-{n}", settles=False)
            else:  # some outstanding serves have expired by NOW
                gate.record_served(Served(cid, d, f"s{cid}-{n}", amount,
                                          NOW.timestamp() + (60 if n % 2 else -60)))
    codes = gate.bulk_admit(*_arrays(cs, charges), NOW.timestamp())
    want = [REFUSE if gate.admit(c, NOW, ch) else ADMIT for c, ch in zip(cs, charges, strict=True)]
    assert codes.tolist() == want


class _Quiet:
    def send_report(self, report: Report, on_reply: object) -> None:
        return None


def test_client_bulk_admits_only_what_admit_would_with_no_side_effect() -> None:
    clock = ManualClock(NOW)
    client = BudgetClient("s", clock, _Quiet())
    cs = [_campaign(cid, 10**9, None, ZONES[cid % 3]) for cid in range(1, 7)]
    today = {c.id: local_day(NOW, c.time_zone) for c in cs}
    client.handle_reply(Reply(0, NOW.timestamp(), 0, [
        Directive(1, "open", 1.0, today[1].isoformat()),
        Directive(2, "open", 0.5, (today[2] - timedelta(days=1)).isoformat()),  # another day
        Directive(3, "metered", 0.2, today[3].isoformat()),
        Directive(4, "stopped", 1.0, today[4].isoformat()),
        Directive(5, "open", 0.7, today[5].isoformat()),
    ], [  # slices: campaign 3's has room, 4 is stopped, 6's is spent by one serve below
        SliceGrant("g3", 3, today[3].isoformat(), 5_000, NOW.timestamp() + 30),
        SliceGrant("g4", 4, today[4].isoformat(), 5_000, NOW.timestamp() + 30),
        SliceGrant("g6", 6, today[6].isoformat(), 1_500, NOW.timestamp() + 30),
    ], "e"))  # campaign 6: never spoken about (metered to the client)
    client.record_served(Served(6, today[6], "i6", 600, NOW.timestamp() + 60, 600))
    ids, days, charges, budgets = _arrays(cs, [1_000] * len(cs))
    codes = client.bulk_admit(ids, days, charges, budgets, NOW.timestamp()).tolist()
    assert codes == [ADMIT, ASK, ADMIT, ASK, ADMIT, ASK]
    assert set(client._demand) == {3}  # as admit records a metered campaign's demand
    client._demand.clear()
    assert client.bulk_pacing(ids).tolist() == [1.0, 0.5, 0.2, 1.0, 0.7, 1.0]
    for c, code in zip(cs, codes, strict=True):
        if code == ADMIT:
            assert client.admit(c, NOW, 1_000) is None
    assert not client.refusals and set(client._demand) == {3}  # ADMIT skipped nothing
    clock.set(NOW + timedelta(seconds=61))  # no reply for a minute: fail closed
    later = NOW.timestamp() + 61  # and every slice has expired
    assert set(client.bulk_admit(ids, days, charges, budgets, later).tolist()) == {ASK}
