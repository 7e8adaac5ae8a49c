"""Every day-simulation scenario, full day, against the acceptance targets (thin entry; the
code and the targets are ``adfunnel.sim.all_scenarios``).

python -m benchmarks.simulate_all [--jobs 2] [--seed 0] [--json out.json] [--only a,b]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from adfunnel.sim.all_scenarios import campaign_table, run_all, scenario_table
from adfunnel.sim.scenarios import scenarios


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=2, help="scenarios run in parallel")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", default=None, help="comma-separated scenario names")
    ap.add_argument("--json", default=None, help="write the summary here")
    ap.add_argument("--plots", default=None, help="directory for the PNG plots")
    ap.add_argument("--campaigns", action="store_true", help="also print the per-campaign table")
    a = ap.parse_args(argv)
    names = a.only.split(",") if a.only else sorted(scenarios())
    reports, rows, overall = run_all(names, a.seed, a.plots, a.jobs)
    print(f"seed {a.seed}, full days\n")
    print("\n".join(scenario_table(rows)))
    print(f"\nabsorbed overspend over all campaigns of all scenarios: median "
          f"{100 * overall['absorbed_median_all']:.4f} %, max "
          f"{100 * overall['absorbed_max_all']:.4f} %; every target met: {overall['all_met']}")
    if a.campaigns:
        print()
        print("\n".join(campaign_table(reports)))
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps({"seed": a.seed, "rows": rows, "overall": overall,
                                            "reports": reports}, indent=1))
    return 0 if overall["all_met"] else 1


if __name__ == "__main__":
    sys.exit(main())
