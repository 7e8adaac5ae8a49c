"""Overload benchmark (thin entry; the code is adfunnel.bench.overload).

python -m benchmarks.overload --clients 1000 --duration-s 5 --deadline-ms 100 --json out.json
"""

from __future__ import annotations

import argparse
import json
import sys

from adfunnel.bench.overload import run_overload


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--clients", type=int, default=1000)
    p.add_argument("--duration-s", type=float, default=5.0)
    p.add_argument("--deadline-ms", type=int, default=100)
    p.add_argument("--campaigns", type=int, default=5)
    p.add_argument("--json", default=None, help="write the result here as JSON")
    a = p.parse_args(argv)
    result = run_overload(a.clients, a.duration_s, a.deadline_ms, a.campaigns)
    text = json.dumps(result, indent=2)
    if a.json:
        with open(a.json, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
