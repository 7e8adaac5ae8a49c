"""Click-model inference benchmark (thin entry; the code is adfunnel.bench.model).

python -m benchmarks.model_bench --dataset criteo --candidates 200 --json out.json

Times the request path's inference of ``candidates`` rows per call against
scikit-learn's own estimators on the same rows in the same run.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from adfunnel.bench.model import run_model_bench
from adfunnel.data import data_dir


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--dataset", default="criteo", choices=["criteo", "avazu"])
    p.add_argument("--input", type=Path, default=None)
    p.add_argument("--candidates", type=int, default=200)
    p.add_argument("--calls", type=int, default=1_000)
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    path = args.input or data_dir(args.dataset) / args.dataset / "wideresdnn_train.csv"
    result = run_model_bench(args.dataset, path, candidates=args.candidates, calls=args.calls)
    text = json.dumps(result, indent=2)
    if args.json is not None:
        args.json.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
