"""The benchmark entry point runs end to end on a tiny workload (no timing asserted)."""

from __future__ import annotations

import json

import pytest
from benchmarks import index_bench

from adfunnel.index.bench import WORKLOADS, run_index_bench

KEYS = {
    "ads",
    "workload",
    "build_s",
    "bytes_per_ad",
    "p50_us",
    "p99_us",
    "candidates_mean",
    "bruteforce_ratio",
}


@pytest.mark.parametrize("workload", WORKLOADS)
def test_run_index_bench_shape(workload: str) -> None:
    out = run_index_bench(ads=300, workload=workload, queries=20, seed=3)
    assert set(out) >= KEYS
    assert out["ads"] == 300 and out["workload"] == workload
    assert out["bytes_per_ad"] > 0 and out["p99_us"] >= out["p50_us"] > 0


def test_module_entry_writes_json(tmp_path) -> None:
    path = tmp_path / "out.json"
    assert (
        index_bench.main(
            ["--ads", "200", "--workload", "go", "--queries", "10", "--json", str(path)]
        )
        == 0
    )
    assert set(json.loads(path.read_text())) >= KEYS


def test_unknown_workload_is_refused() -> None:
    with pytest.raises(ValueError):
        run_index_bench(ads=10, workload="nope", queries=1, seed=1)
