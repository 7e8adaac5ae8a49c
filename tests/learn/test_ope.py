"""Off-policy evaluation on the real Open Bandit random logs: the uniform-random policy
(the logging policy itself) and two fixed policies are estimated with intervals that
contain their logged truth."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from adfunnel.cli import app
from adfunnel.data import data_dir
from adfunnel.learn import ope

OBD = data_dir("open_bandit") / "open_bandit" / "random"


def truth(logged: ope.Logged, policy: ope.Policy) -> float:
    """The policy's click rate from the logged cells themselves: Σ over positions of the
    position's share times Σₐ π(a | k)·(the logged click rate of a at k)."""
    total = 0.0
    for k, dist in policy.items():
        at_k = logged.positions == k
        for a, p in dist.items():
            cell = at_k & (logged.items == a)
            if p and cell.any():
                total += at_k.mean() * p * logged.clicks[cell].mean()
    return total


def policies(items: list[int]) -> dict[str, dict[int, dict[int, float]]]:
    half = items[: len(items) // 2]
    ramp = np.arange(1, len(items) + 1, dtype=float)
    return {
        "uniform": {k: {a: 1 / len(items) for a in items} for k in (1, 2, 3)},
        "first_half": {k: {a: 1 / len(half) for a in half} for k in (1, 2, 3)},
        # position-dependent and far from uniform: weight rising with the item id at
        # the top, falling below
        "ramp": {1: dict(zip(items, ramp / ramp.sum(), strict=True)),
                 2: dict(zip(items, ramp[::-1] / ramp.sum(), strict=True)),
                 3: {a: 1 / len(items) for a in items}},
    }


@pytest.mark.slow
@pytest.mark.parametrize("campaign", ["all", "men", "women"])
def test_intervals_contain_the_logged_truth(campaign: str) -> None:
    logged = ope.load_obd(OBD / campaign / f"{campaign}.csv")
    items = sorted(set(logged.items.tolist()))
    for name, policy in policies(items).items():
        got = ope.estimate(logged, policy)
        want = truth(logged, policy)
        for est, figures in got["estimators"].items():
            assert figures["ci_low"] <= want <= figures["ci_high"], (campaign, name, est)
            assert figures["ci_low"] <= figures["value"] <= figures["ci_high"]
        if name == "uniform":  # the logging policy itself: IPS is the logged rate
            assert got["estimators"]["ips"]["value"] == pytest.approx(got["logged_value"])


def test_a_policy_must_sum_to_one_per_position_and_cover_the_logged_ones(
        tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("item_id,position,probability\n1,1,0.5\n2,1,0.4\n", encoding="utf-8")
    with pytest.raises(ope.OpeError, match=r"position 1: probabilities sum to 0\.900000"):
        ope.load_policy(bad)
    partial = tmp_path / "partial.csv"
    partial.write_text("item_id,position,probability\n1,1,1.0\n", encoding="utf-8")
    logged = ope.load_obd(OBD / "men" / "men.csv")
    with pytest.raises(ope.OpeError, match=r"no distribution for position\(s\) \[2, 3\]"):
        ope.estimate(logged, ope.load_policy(partial))


@pytest.mark.slow
def test_the_ope_command_writes_the_estimates(tmp_path: Path) -> None:
    logged = OBD / "all" / "all.csv"
    items = sorted(set(ope.load_obd(logged).items.tolist()))
    policy = tmp_path / "policy.csv"
    with policy.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["item_id", "position", "probability"])
        for k in (1, 2, 3):
            w.writerows([a, k, 1 / len(items)] for a in items)
    out = tmp_path / "ope.json"
    done = CliRunner().invoke(app, ["model", "ope", "--logged", str(logged), "--format", "obd",
                                    "--target-policy", str(policy), "--json", str(out)])
    assert done.exit_code == 0, done.output
    got = json.loads(out.read_text())
    assert set(got) >= {"logged_value", "estimators"}
    assert set(got["estimators"]) == {"ips", "snips", "dr"}
    assert all(set(e) == {"value", "ci_low", "ci_high"} for e in got["estimators"].values())
    wrong = CliRunner().invoke(app, ["model", "ope", "--logged", str(logged), "--format", "x",
                                     "--target-policy", str(policy)])
    assert wrong.exit_code == 2
