"""Frequency-cap benchmark (thin entry; the code is adfunnel.bench.caps).

python -m benchmarks.caps_bench --decisions 5000 --redis-url redis://127.0.0.1:6379 \
    --json out.json

The decision time that caps add (5 capped candidates per request, one Redis read and
one atomic count per decision) against the same decisions without caps, in one run;
see the module docstring of ``adfunnel.bench.caps`` for every figure.
"""

from __future__ import annotations

import argparse
import json
import sys

from adfunnel.bench.caps import DEFAULT_REDIS_URL, run_caps_bench


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--decisions", type=int, default=5_000)
    p.add_argument("--redis-url", default=DEFAULT_REDIS_URL)
    p.add_argument("--users", type=int, default=1_000)
    p.add_argument("--capped", type=int, default=5)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", default=None, help="write the result here as JSON")
    a = p.parse_args(argv)
    result = run_caps_bench(a.decisions, a.redis_url, users=a.users, capped=a.capped,
                            seed=a.seed)
    text = json.dumps(result, indent=2)
    if a.json:
        with open(a.json, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
