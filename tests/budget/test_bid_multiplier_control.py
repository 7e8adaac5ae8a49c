"""λ of automatic campaigns in the budget service (issue #27): the control loop moves λ
toward the spend plan with p as the fallback at λ's bound, λ restarts on new strategy
terms, directives carry λ (published past a 1 % move) and the client answers it."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, date, datetime

import numpy as np
import pytest

from adfunnel.budget.bulk_view import UNKNOWN_LAMBDA
from adfunnel.budget.client import BudgetClient
from adfunnel.budget.gate import LocalSpendGate
from adfunnel.budget.metrics import CampaignSeries
from adfunnel.budget.multipliers import LAM_PUBLISH_SHARE, START_LAMBDA, split_control
from adfunnel.budget.protocol import (
    BilledUpdate,
    CampaignSpend,
    Directive,
    Reply,
    Report,
    ReportEntry,
)
from adfunnel.budget.service import BudgetService
from adfunnel.budget.snapshot import BudgetSnapshot
from adfunnel.campaigns.model import BidStrategy, BidType, Campaign, Objective, PacingMode
from adfunnel.clock import ManualClock
from adfunnel.pacing.bid_multiplier import LAMBDA_MAX

NOW = datetime(2026, 10, 20, 12, 0, tzinfo=UTC)
DAY = "2026-10-20"
BUDGET = 100_000_000  # 100 USD a day: the plan asks ~11,600 micros per 10 s step
STEP_S = 10


def _manual(bid: int = 400_000, bid_type: BidType = BidType.CPC) -> Campaign:
    return Campaign(1, 1, "c", Objective.CLICKS, bid_type, bid, BUDGET, "UTC",
                    date(2026, 1, 1), bid_strategy_since=NOW)


def _auto(v: int = 1_000_000, since: datetime = NOW) -> Campaign:
    """max_clicks with a cap v (its ``bid_micros``, the value of a click)."""
    return replace(_manual(v), bid_strategy=BidStrategy.MAX_CLICKS, bid_cap_micros=v,
                   bid_strategy_since=since)


class Shard:
    """A warm service, a campaign created now (its plan starts now), spend reported
    every step by one server."""

    def __init__(self, campaign: Campaign) -> None:
        self.clock = ManualClock(NOW)
        self.svc = BudgetService(self.clock, warmup_s=0.0)
        self.svc.upsert_campaign(campaign, created_at=NOW.timestamp())
        self.svc.record_billed(BilledUpdate(1, DAY, 0, 0.0))
        self.reply = self.svc.handle_report(Report("a", 0, NOW.timestamp(), epoch=self.svc.epoch))
        self.seq = 0

    def run(self, steps: int, spend_per_step: int) -> None:
        for _ in range(steps):
            self.clock.advance(STEP_S)
            self.seq += 1
            t = self.clock.now().timestamp()
            charges = 10 if spend_per_step else 0
            entry = ReportEntry(self.seq, t, [CampaignSpend(1, DAY, spend_per_step, 0,
                                                            spend_per_step, charges)])
            self.svc.handle_report(Report("a", 0, t, [entry], epoch=self.svc.epoch,
                                          directives_version=self.reply.version))
            self.svc.step()
            self.reply = self.svc.handle_report(Report(
                "a", 0, t, epoch=self.svc.epoch, directives_version=self.reply.version))

    def lam(self) -> float:
        return self.svc.current(1, self.clock.now().timestamp()).lam

    def p(self) -> float:
        return self.svc.current(1, self.clock.now().timestamp()).ctl.p


def test_lambda_rises_ahead_of_plan_and_p_stays_one() -> None:
    """Spending 13× the plan, 2.2 M ahead (past p's hold band, 1 % of the budget): λ
    rises (bids fall), p stays 1 while λ is below its bound. Red when ``split_control``
    lets p's proposal through (p falls) or when the λ step is skipped (λ stays)."""
    shard = Shard(_manual(40_000))
    shard.svc.upsert_campaign(replace(_auto(100_000), version=2))  # from 0.04: λ 2.5
    assert shard.lam() == pytest.approx(2.5)
    shard.run(16, 150_000)
    assert 2.5 < shard.lam() < LAMBDA_MAX
    assert shard.p() == 1.0


def test_lambda_falls_toward_one_behind_plan() -> None:
    """No spend at all (the campaign's bids win nothing): λ falls, by at most 25 % a
    step, down to 1. Red when the λ step ignores ``behind`` (no idle gain: λ holds)."""
    shard = Shard(_auto())
    assert shard.lam() == START_LAMBDA
    shard.run(1, 0)
    assert START_LAMBDA * 0.75 <= shard.lam() < START_LAMBDA
    shard.run(60, 0)
    assert shard.lam() == 1.0 and shard.p() == 1.0


def test_p_takes_the_cut_once_lambda_is_at_its_bound_and_hands_it_back() -> None:
    """At λ = LAMBDA_MAX and still ahead, p falls; once behind, p returns to 1 before
    λ may fall again. Red when throttling never takes over (p stays 1)."""
    shard = Shard(_auto())  # a new automatic campaign starts at the bound
    shard.run(30, 200_000)  # 6 M ahead: past the hold band of 3 charges (3 M)
    assert shard.lam() == LAMBDA_MAX and shard.p() < 1.0
    shard.run(700, 0)  # the plan catches up with the 6 M after ~520 steps
    assert shard.p() == 1.0 and shard.lam() < LAMBDA_MAX


def test_split_control_hands_the_cut_between_lambda_and_p() -> None:
    """The rule on its own: p only while throttling or at the bound ahead of plan; λ
    holds while p < 1. Red when λ moves while p < 1."""
    lam, p = split_control(np.array([2.0, LAMBDA_MAX, LAMBDA_MAX, 3.0]),
                           np.array([2.5, LAMBDA_MAX, LAMBDA_MAX, 2.0]),
                           np.array([1.0, 1.0, 1.0, 0.5]), np.array([0.8, 0.8, 0.8, 0.6]),
                           np.array([-5.0, -5.0, 5.0, 5.0]))
    assert lam.tolist() == [2.5, LAMBDA_MAX, LAMBDA_MAX, 3.0]
    assert p.tolist() == [1.0, 0.8, 1.0, 0.6]


def test_a_strategy_switch_restarts_lambda_at_the_bid_it_replaces() -> None:
    """manual 0.40 → max_clicks v = 1.00: λ = 2.5 (the same bid); a new cap keeps the
    bid (v 2.00: λ 5); a switch of the billed action (CPM → CPC) has no bid in its unit:
    ``START_LAMBDA``. Red when a term change keeps λ (``_note_strategy`` returning
    early on a moved ``since``)."""
    shard = Shard(_manual())
    shard.svc.upsert_campaign(replace(_auto(1_000_000), version=2))
    assert shard.lam() == pytest.approx(2.5)
    later = datetime(2026, 10, 20, 12, 5, tzinfo=UTC)
    shard.svc.upsert_campaign(replace(_auto(2_000_000, since=later), version=3))
    assert shard.lam() == pytest.approx(5.0)
    cpm = Shard(_manual(2_000_000, BidType.CPM))
    cpm.svc.upsert_campaign(replace(_auto(), version=2))
    assert cpm.lam() == START_LAMBDA
    back = replace(_manual(), version=4, bid_strategy_since=later)
    shard.svc.upsert_campaign(back)  # manual again: bids its bid, λ 1
    assert shard.lam() == 1.0


def test_a_new_day_starts_from_yesterdays_lambda() -> None:
    """The next day's row starts at the λ its campaign had at the same quarter hour
    yesterday. Red when ``_first_lams`` is skipped (the new day restarts at START)."""
    shard = Shard(_manual())
    shard.svc.upsert_campaign(replace(_auto(), version=2))
    shard.run(6, 58_000)
    lam = shard.lam()
    shard.clock.advance(86_400)
    assert shard.lam() == pytest.approx(lam, rel=1e-6)


def test_directives_carry_lambda_published_past_a_one_percent_move() -> None:
    """The reply's directive carries λ; the client answers it (one and in bulk), and the
    lowest bids (``UNKNOWN_LAMBDA``) for a campaign it has not heard of: a server that
    has not heard from the service never lets an automatic campaign bid its whole value
    (red with the bulk view's fill at 1.0, or the dict's default at 1.0). The local gate,
    with no service, answers 1. A move under 1 % publishes nothing. Red when
    ``_lam_published`` ignores λ (no directive after the switch)."""
    shard = Shard(_manual())
    shard.svc.upsert_campaign(replace(_auto(), version=2))
    shard.run(1, 11_600)
    got = [d for d in shard.reply.directives if d.campaign_id == 1]
    assert got and got[-1].lam == pytest.approx(shard.lam())
    client = BudgetClient("s", shard.clock, transport=None)  # type: ignore[arg-type]
    client.handle_reply(shard.reply)
    assert client.bid_multiplier(1) == pytest.approx(shard.lam())
    assert client.bulk_multiplier(np.array([1, 2, 1 << 40])).tolist() == [
        pytest.approx(shard.lam()), UNKNOWN_LAMBDA, UNKNOWN_LAMBDA]
    assert client.bid_multiplier(2) == UNKNOWN_LAMBDA
    assert LocalSpendGate().bid_multiplier(1) == 1.0
    t, row = shard.svc._rows, shard.svc.current(1, shard.clock.now().timestamp()).row
    version = shard.svc._version
    t.lam[row] = t.pub_lam[row] * (1 + LAM_PUBLISH_SHARE / 2)
    shard.svc._refresh(np.array([row]), shard.clock.now().timestamp())
    assert shard.svc._version == version
    t.lam[row] = t.pub_lam[row] * (1 + 2 * LAM_PUBLISH_SHARE)
    shard.svc._refresh(np.array([row]), shard.clock.now().timestamp())
    assert shard.svc._version == version + 1


def test_a_directive_without_lambda_decodes_as_one() -> None:
    """A reply of a service from before λ (no ``lam`` field) decodes with λ = 1. Red
    when ``lam`` has no default."""
    import msgspec

    old = b'{"shard":0,"at":1.0,"acked_through":0,"directives":[{"campaign_id":1,' \
          b'"state":"open","p":0.5,"day":"2026-10-20"}]}'
    reply = msgspec.json.decode(old, type=Reply)
    assert reply.directives == [Directive(1, "open", 0.5, DAY, 1.0)]


def test_manual_and_accelerated_campaigns_publish_lambda_one() -> None:
    """A manual campaign's directives say λ = 1; so do an accelerated automatic one's
    (no plan to follow: it bids its value). Red when λ is published for every
    automatic campaign (the ``even`` test dropped)."""
    shard = Shard(_manual())
    shard.run(3, 58_000)
    assert [d.lam for d in shard.svc.directives()] == [1.0]
    fast = Shard(replace(_auto(), pacing_mode=PacingMode.ACCELERATED))
    fast.run(3, 58_000)
    assert [d.lam for d in fast.svc.directives()] == [1.0]


def test_lambda_reaches_the_snapshot_the_status_and_the_metric_series() -> None:
    """The snapshot, the status records and ``adfunnel_bid_multiplier`` (top campaigns
    by spend, the rest folded into ``other`` as their mean) carry λ. Red when the
    snapshot leaves λ out (``lam`` None: every series reads 1)."""
    shard = Shard(_manual())
    shard.svc.upsert_campaign(replace(_auto(), version=2))
    shard.svc.upsert_campaign(replace(_manual(), id=2, name="m"))
    shard.run(2, 58_000)
    t = shard.clock.now().timestamp()
    snap = shard.svc.snapshot(t)
    lam = shard.lam()
    assert lam > 1.0
    assert dict(zip(snap.campaign_id.tolist(), snap.multipliers().tolist(),
                    strict=True)) == {1: pytest.approx(lam), 2: 1.0}
    series = CampaignSeries()
    series.follow(lambda: snap, top=1)
    got = {tuple(s.labels.values()): s.value for fam in series.collect()
           if fam.name == "adfunnel_bid_multiplier" for s in fam.samples}
    assert got == {("1",): pytest.approx(lam), ("other",): 1.0}
    rows = [{"campaign_id": 1, "state": "open", "p": 1.0, "budget_micros": 1,
             "billed_micros": 0, "committed_micros": 0, "lam": 3.0}]
    assert BudgetSnapshot.from_status(rows).multipliers().tolist() == [3.0]
