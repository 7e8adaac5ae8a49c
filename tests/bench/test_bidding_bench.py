"""``adfunnel bench bidding`` on one advertiser at c0 = 1/32 (the real iPinYou rows), and
Lin's rule and the data's format on hand-made episodes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from adfunnel.bench.auctions import Episodes, lin_replay, load, spend_matching_scale
from adfunnel.cli import app

KEYS = {"advertiser", "c0", "auction", "strategy", "clicks", "impressions", "spend", "budget",
        "episodes", "episodes_over_budget"}


@pytest.mark.slow
def test_one_advertiser_at_one_thirty_second(tmp_path: Path) -> None:
    """Four rows, the issue's keys, nothing over budget. Red when the replay forgets the
    admit rule (bid not capped at the remaining budget)."""
    out = tmp_path / "bidding.json"
    res = CliRunner().invoke(app, ["bench", "bidding", "--advertisers", "3386", "--c0", "1/32",
                                   "--json", str(out)])
    assert res.exit_code == 0, res.output
    rows = json.loads(out.read_text())["rows"]
    assert {(r["auction"], r["strategy"]) for r in rows} == {
        ("second_price", "lin"), ("second_price", "adfunnel"),
        ("first_price", "value"), ("first_price", "adfunnel")}
    for r in rows:
        assert set(r) >= KEYS
        assert r["episodes"] == 50 and r["episodes_over_budget"] == 0
        assert r["budget"] == 50 * 2403 and 0 < r["spend"] <= r["budget"]
        assert r["clicks"] <= r["impressions"]


def _episodes(rows: list[list[tuple[int, int, float]]]) -> Episodes:
    arr = np.array(rows, dtype=np.float64)  # (episodes, T, 3)
    return Episodes(arr[:, :, 1].astype(np.int64).T.copy(), arr[:, :, 2].T.copy(),
                    arr[:, :, 0].T.copy() > 0)


def test_lin_bids_the_floor_capped_at_300_and_the_remaining_budget() -> None:
    """b0 = 100, average CTR 0.01: bids ⌊pCTR × 10,000⌋. Red when the remaining-budget cap
    is dropped (the third auction would be won above the budget)."""
    ep = _episodes([[(1, 50, 0.0051), (0, 60, 0.0059), (1, 55, 0.05), (0, 0, 0.0)]])
    out = lin_replay(ep, 0.01, 100, np.array([100]))
    # bids 51, 59, min(500, 300, 50) = 50, 0: wins the 1st (50), loses the 2nd (59 < 60)
    # and the 3rd (50 < 55), wins the 4th at price 0 with a bid of 0 (the study's rule)
    assert out.spend.tolist() == [50]
    assert out.impressions.tolist() == [2]
    assert out.clicks.tolist() == [1]


def test_spend_matching_scale() -> None:
    """Thresholds price ÷ pCTR: 100, 200, 400, 3·10⁶ (prices 1, 2, 4, 300) over two
    episodes: mean spend 0.5, 1.5, 3.5, … A budget of 1 is reached at scale 200, 3 at
    400. Red when the cumulative spend is not divided by the episodes."""
    ep = _episodes([[(0, 1, 0.01), (0, 2, 0.01)], [(0, 4, 0.01), (0, 300, 0.0001)]])
    assert spend_matching_scale(ep, 1) == pytest.approx(200)
    assert spend_matching_scale(ep, 3) == pytest.approx(400)


def test_load_reads_episodes_and_the_training_figures(tmp_path: Path) -> None:
    """Red when the columns are read in another order (click, price, pCTR)."""
    (tmp_path / "9.train-info.txt").write_text("CPC:\t1\nCPM:\t64000.5\navg ctr:\t0.001\n")
    (tmp_path / "9.validation.txt").write_text(
        "4\t2\n1\n0\t51\t0.25\n1\t7\t0.5\n2\n0\t3\t0.125\n0\t0\t0.0\n")
    adv = load(tmp_path, "9")
    assert adv.cpm == 64000.5 and adv.avg_ctr == 0.001
    assert adv.episodes.price.tolist() == [[51, 3], [7, 0]]
    assert adv.episodes.click.tolist() == [[False, False], [True, False]]
    assert adv.episodes.pctr[:, 0].tolist() == [0.25, 0.5]
    assert adv.budget(1 / 32) == 4  # ⌊64.0005 × 1/32 × 2⌋
