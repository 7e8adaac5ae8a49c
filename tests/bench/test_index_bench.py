"""The benchmark entry point runs end to end on a tiny workload (no timing asserted);
measured and extrapolated brute-force figures are labelled; the log is found through
``ADFUNNEL_DATA_DIR`` like everywhere else."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from benchmarks import index_bench

from adfunnel.bench.index import WORKLOADS, run_index_bench

KEYS = {
    "ads",
    "workload",
    "build_s",
    "bytes_per_ad",
    "p50_us",
    "p99_us",
    "candidates_mean",
    "brute_force_ratio",
    "brute_force_cpu_p50_us",
    "brute_force_measured_ads",
    "brute_force_measured_cpu_p50_us",
    "brute_force_extrapolated",
}


@pytest.mark.slow
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


def test_brute_force_is_labelled_measured_below_the_cap() -> None:
    out = run_index_bench(ads=300, workload="go", queries=10, seed=3)
    assert out["brute_force_measured_ads"] == 300
    assert out["brute_force_extrapolated"] is False
    assert out["brute_force_cpu_p50_us"] == out["brute_force_measured_cpu_p50_us"]


def test_brute_force_above_the_cap_is_labelled_extrapolated() -> None:
    out = run_index_bench(ads=400, workload="go", queries=10, seed=3, brute_force_ads=100)
    assert out["brute_force_measured_ads"] == 100
    assert out["brute_force_extrapolated"] is True
    # linear per ad: 4 × the measured figure (each rounded to 0.1 µs)
    assert out["brute_force_cpu_p50_us"] == pytest.approx(
        4 * out["brute_force_measured_cpu_p50_us"], abs=0.5)


def _fake_log(root: Path) -> None:
    """Two rows in the iPinYou impression-log layout (27+ tab-separated columns)."""
    d = root / "ipinyou" / "dlf_2259"
    d.mkdir(parents=True)
    row = ["0"] * 27
    row[4] = "20130606000104828"  # yyyyMMddHHmmssSSS, China time
    row[7], row[9], row[10], row[11], row[12] = "windows_chrome", "80", "85", "2", "dom1"
    row[16], row[17], row[26] = "300", "250", "10006,13866"
    (d / "train.log.txt").write_text("\t".join(row) + "\n" + "\t".join(row) + "\n")


def test_real_workload_reads_the_log_under_adfunnel_data_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_log(tmp_path)
    monkeypatch.setenv("ADFUNNEL_DATA_DIR", str(tmp_path))
    out = run_index_bench(ads=50, workload="real", queries=5, seed=3)
    assert out["source"] == "ipinyou/dlf_2259"


def test_real_workload_without_the_log_reports_the_fallback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ADFUNNEL_DATA_DIR", str(tmp_path))  # empty: no ipinyou/ there
    out = run_index_bench(ads=50, workload="real", queries=5, seed=3)
    assert out["source"] == "fallback"
