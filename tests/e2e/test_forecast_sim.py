"""The availability forecast judged on traffic it did not see, in the simulation
(``adfunnel simulate --scenario forecast``, short form): after a week of history through
a real embedded server, the forecasts asked for the next week are within ±20 % of the
matching requests that week sent and of what the booked line left, both counted by the
simulation from the requests it sent.

Mutations seen red: the sample not fed by the simulation's requests (``FlightRun``
without ``rt.requests.sampler.record``: every forecast 0); the forecast's booked-line
allocation skipped (``available`` = ``matching``: the booked line leaves about two
thirds of news, so that forecast errs by about +40 %).
"""

from __future__ import annotations

from typing import Any

import pytest

from adfunnel.sim.forecast_check import CANDIDATES, TOLERANCE, run_forecast_check

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture(scope="module")
def result() -> dict[str, Any]:
    return run_forecast_check(seed=3, short=True)


def test_forecasts_meet_their_targets_on_the_next_week(result: dict[str, Any]) -> None:
    assert [c["name"] for c in result["candidates"]] == [n for n, _, _ in CANDIDATES]
    for c in result["candidates"]:
        assert c["matching_requests_sent"] > 300, c
        assert abs(c["matching_error"]) <= TOLERANCE, c
        assert abs(c["available_error"]) <= TOLERANCE, c
    assert result["targets_met"] is True


def test_the_booked_line_contends_where_it_takes(result: dict[str, Any]) -> None:
    """The news line is named where it takes (mobile on news, all news, travel fans on
    news) and really took: what was left is under what matched."""
    booked = result["booked_line"]
    assert booked["served"] > 0.9 * booked["goal"]
    for c in result["candidates"]:
        names = [ln["name"] for ln in c["forecast"]["contending_lines"]]
        assert names == ["booked"], c
        assert c["left_after_booked"] < c["matching_requests_sent"]
        assert c["forecast"]["available_impressions"] < c["forecast"]["matching_impressions"]
        basis = c["forecast"]["basis"]
        assert basis["slots"] == "hour_of_week" and basis["history_days"] >= 7
