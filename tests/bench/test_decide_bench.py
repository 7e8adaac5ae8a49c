"""``adfunnel bench decide`` on a small real-workload catalogue: every stage measured,
the predict stage only when a model is given (null otherwise, never 0)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from adfunnel.bench.decide import run_decide_bench
from adfunnel.prediction.model import ClickModel
from adfunnel.serving.decider import STAGES


def test_the_stages_with_and_without_the_predict_stage(tmp_path: Path) -> None:
    plain = run_decide_bench(ads=2_000, queries=40, reference_queries=40)
    assert plain["stage_us"]["predict"] is None and plain["model_version"] is None
    assert plain["agreement"] == 1.0  # the columnar path decides as the reference does
    model = ClickModel("served-log", 12, np.random.default_rng(1).normal(0, 0.1, 2**12),
                       -5.0, -1.0, 0.0)
    model.save(tmp_path / "m")
    scored = run_decide_bench(ads=2_000, queries=40, reference_queries=10,
                              model=tmp_path / "m")
    assert set(scored["stage_us"]) == set(STAGES)
    assert scored["stage_us"]["predict"] > 0 and scored["model_version"] == model.version
    assert scored["fallback_share"] == 0.0 and scored["agreement"] is None
