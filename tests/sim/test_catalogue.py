"""The replay's run-of-network catalogue: drawn from the real log, valid for the API."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from adfunnel.sim.catalogue import catalogue
from adfunnel.sim.ipinyou import default_logs, read_log
from adfunnel.targeting.expr import parse_expr


@pytest.fixture(scope="module")
def rows() -> list:
    return read_log(default_logs())[:3_000]


@pytest.mark.slow
def test_the_catalogue_follows_the_logs_sizes_and_regions(rows: list) -> None:
    plans = catalogue(2_000, rows, 1_000_000, seed=7)
    assert plans == catalogue(2_000, rows, 1_000_000, seed=7)  # deterministic
    assert len(plans) == 2_000 and len({p.index for p in plans}) == 2_000
    sizes = Counter((r.width, r.height) for r in rows)
    drawn = Counter((p.width, p.height) for p in plans)
    assert set(drawn) <= set(sizes)
    top = sizes.most_common(1)[0][0]
    assert drawn.most_common(1)[0][0] == top  # as often as the log shows them
    regions = {f"CN-{r.region}" for r in rows}
    targeted = [p for p in plans if p.targeting is not None]
    assert 0.3 < len(targeted) / len(plans) < 0.5
    for p in targeted:
        parse_expr(p.targeting)  # the advertiser API's own parser accepts it
        assert set(p.targeting["in"]) <= regions
    bids = sorted(p.bid_micros for p in plans)
    assert 700_000 < bids[len(bids) // 2] < 1_400_000 and bids[0] >= 1
    body = plans[0].campaign_body(3, "2013-10-19")
    assert body["bid_type"] == "CPC" and json.dumps(body)


def test_no_rows_no_catalogue() -> None:
    assert catalogue(0, [], 1, seed=1) == []
    with pytest.raises(ValueError):
        catalogue(5, [], 1, seed=1)


@pytest.mark.slow
def test_no_catalogue_leaves_the_replays_draws_alone() -> None:
    from datetime import UTC, datetime

    from adfunnel.sim.replayer import Replayer

    replayer, fresh = Replayer("http://127.0.0.1:9", seed=7), Replayer("http://127.0.0.1:9", seed=7)
    try:
        replayer.create_catalogue([], datetime(2013, 10, 19, tzinfo=UTC), 0)
        # the render and click draws of a replay are those of a replay without --catalogue
        assert replayer.rng.getstate() == fresh.rng.getstate()
    finally:
        replayer.close()
        fresh.close()
