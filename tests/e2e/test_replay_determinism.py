"""The replay's report depends only on the seed: a second run, with the brute-force scan
in place of the conjunction index, reports exactly the same."""

from __future__ import annotations

from typing import Any

import pytest

from adfunnel.sim.ipinyou import load_rows
from adfunnel.sim.replay import run_replay

pytestmark = pytest.mark.e2e


def _without_timings(report: dict[str, Any]) -> dict[str, Any]:
    """The report less its wall-clock figures (request latency, beacon-to-ledger lag)."""
    out = {k: v for k, v in report.items() if k != "latency_ms"}
    out["events"] = {k: v for k, v in report["events"].items() if k != "lag_ms"}
    return out


def test_same_seed_same_report_with_either_index(tmp_path) -> None:
    rows = load_rows(limit=2_000)
    runs = []
    for i, index in enumerate(("conjunction", "scan")):
        work = tmp_path / f"run{i}"
        work.mkdir()
        runs.append(run_replay(rows, seed=11, workdir=work, server_env={"ADFUNNEL_INDEX": index}))
    first = _without_timings(runs[0])
    assert first["filled_slots"] > 0
    assert _without_timings(runs[1]) == first
