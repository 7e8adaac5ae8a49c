"""``adfunnel simulate`` and ``adfunnel bench``: a progress bar, a summary with units,
and PNG plots whose axes are labelled."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from adfunnel.cli import app
from adfunnel.cli.summary import flatten, format_value, summary_table, unit_of
from adfunnel.sim.day import DaySim
from adfunnel.sim.plots import campaign_figures
from adfunnel.sim.scenarios import scenarios


def test_units_are_read_from_the_names() -> None:
    assert [unit_of(n) for n in ("p99_ms", "p50_us", "build_s", "decisions_per_s",
                                 "per_core", "billed_micros", "bytes_per_ad", "shed_share",
                                 "fill_rate", "tracker_ratio", "answers")] == \
        ["ms", "µs", "s", "/s", "/s per busy core", "micros", "", "fraction", "fraction",
         "ratio", ""]
    assert dict(flatten({"a": {"b_ms": 1.5, "c": [1, 2]}, "d": None})) == \
        {"a.b_ms": 1.5, "a.c": "[2 items]", "d": None}
    assert format_value(1234567) == "1,234,567" and format_value(None) == "n/a"
    assert format_value(0.123456) == "0.1235" and format_value(True) == "true"


def test_a_summary_table_has_a_unit_column() -> None:
    table = summary_table("t", {"select": {"p99_ms": 2.0}, "answers": 3})
    assert [c.header for c in table.columns] == ["figure", "value", "unit"]
    assert list(table.columns[2].cells) == ["ms", ""]


@pytest.mark.slow
def test_simulate_shows_progress_a_summary_with_units_and_writes_plots(tmp_path: Path) -> None:
    report, plots = tmp_path / "r.json", tmp_path / "plots"
    done = CliRunner().invoke(app, ["simulate", "--scenario", "midnight", "--short",
                                    "--report", str(report), "--plots", str(plots)],
                              env={"COLUMNS": "200"})
    assert done.exit_code == 0, done.output
    assert "simulating midnight" in done.output and "100%" in done.output  # the bar
    assert "units: budget in currency units" in done.output
    assert json.loads(report.read_text())["scenario"] == "midnight"
    pngs = sorted(plots.glob("*.png"))
    assert pngs and all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)


@pytest.mark.slow
def test_every_plot_axis_is_labelled() -> None:
    sim = DaySim(scenarios()["midnight"], 0, True)
    sim.run()
    figures = list(campaign_figures(sim))
    assert figures
    for name, fig in figures:
        assert name.endswith(".png")
        top, bottom = fig.axes
        assert top.get_ylabel() == "cumulative share of daily budget"
        assert bottom.get_ylabel() == "pacing p (log)"
        assert bottom.get_xlabel() == top.get_xlabel() == "local time (hours since midnight)"
        assert top.get_title() and top.get_legend() is not None


@pytest.mark.slow
def test_bench_shows_a_summary_with_units(tmp_path: Path) -> None:
    out = tmp_path / "index.json"
    done = CliRunner().invoke(app, ["bench", "index", "--ads", "2000", "--workload", "go",
                                    "--queries", "50", "--json", str(out)],
                              env={"COLUMNS": "200"})
    assert done.exit_code == 0, done.output
    assert "bench index" in done.output and "unit" in done.output
    figures = json.loads(out.read_text())
    timed = [k for k in figures if k.endswith(("_ms", "_us", "_s"))]
    assert timed
    for key in timed:  # each timed figure's row names its unit
        row = next(ln for ln in done.output.splitlines() if f" {key} " in ln)
        assert unit_of(key) in row
