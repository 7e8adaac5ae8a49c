"""Automatic-bidding benchmark (thin entry; the code is adfunnel.bench.bidding).

python -m benchmarks.bidding_bench --advertisers 1458,3358 --c0 1/32 --json out.json

Our λ-paced value bids against linear bidding (Lin) on the iPinYou auctions of Cai et al.
(WSDM 2017), and first-price shading against the unshaded value bid; tuned on episodes
1-50, measured on 51-100. See ``adfunnel.bench.bidding`` for every figure.
"""

from __future__ import annotations

import argparse
import json
import sys
from fractions import Fraction

from adfunnel.bench.auctions import ADVERTISERS, C0S
from adfunnel.bench.bidding import run_bidding_bench


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--advertisers", default=",".join(ADVERTISERS))
    p.add_argument("--c0", default=",".join(str(Fraction(c).limit_denominator()) for c in C0S))
    p.add_argument("--json", default=None, help="write the result here as JSON")
    a = p.parse_args(argv)
    result = run_bidding_bench(
        advertisers=tuple(x for x in a.advertisers.split(",") if x),
        c0s=tuple(float(Fraction(x)) for x in a.c0.split(",") if x))
    text = json.dumps(result, indent=2)
    if a.json:
        with open(a.json, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    print(json.dumps(result["totals"], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
