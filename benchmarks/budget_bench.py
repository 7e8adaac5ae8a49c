"""Budget & pacing service benchmark (thin entry; the code is adfunnel.bench.budget).

python -m benchmarks.budget_bench --campaigns 1000000 --json out.json

Start-up (bulk reads of campaigns, billed spend and traffic shapes from a SQLite file),
the first control step, one control step with spend reported for a share of the
campaigns, and one report round of 1,000 campaigns' spend; see the module docstring
of ``adfunnel.bench.budget`` for every figure.
"""

from __future__ import annotations

import argparse
import json
import sys

from adfunnel.bench.budget import run_budget_bench


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--campaigns", type=int, default=100_000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--workdir", default=None, help="where the temporary database goes")
    p.add_argument("--json", default=None, help="write the result here as JSON")
    a = p.parse_args(argv)
    result = run_budget_bench(a.campaigns, seed=a.seed, workdir=a.workdir)
    text = json.dumps(result, indent=2)
    if a.json:
        with open(a.json, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
