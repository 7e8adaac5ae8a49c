"""Conjunction index benchmark (thin entry; the code is adfunnel.bench.index).

python -m benchmarks.index_bench --ads 1000000 --workload real --json out.json

Brute force is measured on at most ``--brute-force-ads`` ads (100,000) and extrapolated
linearly above: ``brute_force_extrapolated`` in the output says which.
"""

from __future__ import annotations

import argparse
import json
import sys

from adfunnel.bench.index import BRUTEFORCE_ADS, WORKLOADS, run_index_bench


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--ads", type=int, default=100_000)
    p.add_argument("--workload", choices=WORKLOADS, default="real")
    p.add_argument("--queries", type=int, default=1000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--data-dir", default=None,
                   help="folder holding ipinyou/ (real workload); default $ADFUNNEL_DATA_DIR, "
                        "else shared/data beside the checkout")
    p.add_argument("--brute-force-ads", type=int, default=BRUTEFORCE_ADS,
                   help="ads the brute-force scan is timed on; above, it is extrapolated")
    p.add_argument("--json", default=None, help="write the result here as JSON")
    a = p.parse_args(argv)
    result = run_index_bench(a.ads, a.workload, a.queries, a.seed, data_dir=a.data_dir,
                             brute_force_ads=a.brute_force_ads)
    text = json.dumps(result, indent=2)
    if a.json:
        with open(a.json, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
