"""OpenRTB benchmark (thin entry; the code is adfunnel.bench.openrtb).

python -m benchmarks.openrtb_bench --ads 100000 --concurrency 16 --duration-s 20 \
    --rounds 4 --db F --json out.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from adfunnel.bench.openrtb import run_openrtb_bench


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--ads", type=int, default=100_000)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--duration-s", type=float, default=20.0, help="measured s per route")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--warmup-s", type=float, default=2.0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--server-log", default=None, help="write the server's output here")
    p.add_argument("--db", default=None,
                   help="keep the SQLite catalogue here, or reuse it when it exists")
    p.add_argument("--json", default=None, help="write the result here as JSON")
    a = p.parse_args(argv)
    result = run_openrtb_bench(ads=a.ads, workers=a.workers, concurrency=a.concurrency,
                               duration_s=a.duration_s, rounds=a.rounds,
                               warmup_s=a.warmup_s, seed=a.seed,
                               log_path=Path(a.server_log) if a.server_log else None,
                               db_path=Path(a.db) if a.db else None)
    text = json.dumps(result, indent=2)
    if a.json:
        Path(a.json).write_text(text + "\n", encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
