"""``BudgetClient.fits``: the re-check of a serve about to be committed (an OpenRTB bid's
worst cost) answers as ``admit`` would, from the slices held, and changes nothing."""

from __future__ import annotations

from datetime import UTC, date, datetime

from adfunnel.budget.client import BudgetClient
from adfunnel.budget.gate import Served, fits
from adfunnel.budget.protocol import Directive, Reply, Report, SliceGrant
from adfunnel.campaigns.model import BidType, Campaign, Objective
from adfunnel.clock import ManualClock

START = datetime(2026, 11, 1, 12, tzinfo=UTC)
DAY = START.date().isoformat()


class _Quiet:
    def send_report(self, report: Report, on_reply: object) -> None:
        return None


def _client(state: str, slice_micros: int) -> BudgetClient:
    client = BudgetClient("s", ManualClock(START), _Quiet())
    t = START.timestamp()
    grants = [SliceGrant("g1", 1, DAY, slice_micros, t + 30)] if slice_micros else []
    client.handle_reply(Reply(0, t, -1, [Directive(1, state, 1.0, DAY)], grants, "e",
                              version=1))
    return client


CAMPAIGN = Campaign(1, 1, "c", Objective.IMPRESSIONS, BidType.CPM, 2_500_000, 10**9,
                    "UTC", date(2026, 1, 1))


def test_fits_reads_the_held_slice_and_has_no_side_effect() -> None:
    """Breaks if a metered campaign fits without a slice with room (tried: ``fits``
    answering True but for stopped: 3,001 fits a 3,000 slice), or if it records demand
    like ``admit`` (tried: ``fits`` calling ``admit``: the report wants a slice)."""
    client = _client("metered", 3_000)
    assert fits(client, CAMPAIGN, START, 3_000)
    assert not fits(client, CAMPAIGN, START, 3_001)
    [report] = client.build_reports(START.timestamp())
    assert report.wants == [] and client.refusals == {}  # no demand, no refusal
    client.record_served(Served(1, START.date(), "i1", 2_500, START.timestamp() + 60, 2_500))
    assert not fits(client, CAMPAIGN, START, 2_500)  # 500 left in the slice
    assert fits(_client("open", 0), CAMPAIGN, START, 10**9)
    assert not fits(_client("stopped", 10_000), CAMPAIGN, START, 1)
    assert fits(_client("exhausted", 3_000), CAMPAIGN, START, 3_000)  # a slice still held
