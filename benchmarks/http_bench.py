"""HTTP benchmark (thin entry; the code is adfunnel.bench.http).

python -m benchmarks.http_bench --ads 100000 --workers 2 --concurrency 16 --duration-s 10 \
    --json out.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from adfunnel.bench.http import run_http_bench


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--ads", type=int, default=100_000)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--duration-s", type=float, default=10.0)
    p.add_argument("--load", choices=("auto", "wrk", "python"), default="auto")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--server-log", default=None, help="write the server's output here")
    p.add_argument("--db", default=None,
                   help="keep the SQLite database here, or reuse it when it exists")
    p.add_argument("--json", default=None, help="write the result here as JSON")
    a = p.parse_args(argv)
    result = run_http_bench(ads=a.ads, workers=a.workers, concurrency=a.concurrency,
                            duration_s=a.duration_s, seed=a.seed, load=a.load,
                            log_path=Path(a.server_log) if a.server_log else None,
                            db_path=Path(a.db) if a.db else None)
    text = json.dumps(result, indent=2)
    if a.json:
        with open(a.json, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
