"""The full-day benchmark's judging, on short reports (the loop itself is trivial)."""

from __future__ import annotations

import copy

import pytest

from adfunnel.sim.all_scenarios import campaign_table, scenario_row, scenario_table
from adfunnel.sim.day_report import run_simulation


@pytest.mark.slow
def test_restart_target_counts_absorbed_charges_of_the_restarted_shard() -> None:
    r = run_simulation("service-restart", short=True)
    row = scenario_row(r)
    assert row["restart_absorbed_charges_max"] is not None
    bad = copy.deepcopy(r)
    cid = next(iter(bad["restart"]["absorbed_micros"]))
    charge = next(c["charge_micros"] for c in bad["campaigns"] if c["campaign_id"] == int(cid))
    bad["restart"]["absorbed_micros"][cid] = 2 * charge
    worse = scenario_row(bad)
    assert worse["restart_absorbed_charges_max"] == 2.0 and not worse["met"]["restart"]


@pytest.mark.slow
def test_unmeasured_figures_print_as_n_a_and_are_not_judged() -> None:
    r = run_simulation("baseline", short=True)  # no whole local hour: no curve error
    row = scenario_row(r)
    assert row["curve_error_max"] is None and row["met"]["curve"]
    assert row["restart_absorbed_charges_max"] is None and row["met"]["restart"]
    assert "n/a" in scenario_table([row])[2]
    assert all("| n/a |" in line for line in campaign_table([r])[2:])
