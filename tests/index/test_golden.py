"""Golden targeting cases: every tests/index/golden/*.json runs here (a new case needs no code).

File shape: ``{"ads": [{"id", "targeting", "score"?}], "cases": [{"request": {attr: [v]},
"expected": [ad ids]}]}``; ``expected`` is the set of matching ads.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from adfunnel.index import ConjunctionIndex, ScanIndex
from adfunnel.targeting import matches, parse_expr

GOLDEN = sorted((Path(__file__).parent / "golden").glob("*.json"))


def _request(raw: dict[str, list[str]]) -> dict[str, frozenset[str]]:
    return {a: frozenset(str(v) for v in vs) for a, vs in raw.items()}


@pytest.mark.parametrize("path", GOLDEN, ids=[p.stem for p in GOLDEN])
@pytest.mark.parametrize("path_kind", ["bulk", "upsert", "merged"])
def test_golden(path: Path, path_kind: str) -> None:
    spec: dict[str, Any] = json.loads(path.read_text())
    ads = [(a["id"], parse_expr(a["targeting"]), float(a.get("score", 0.0))) for a in spec["ads"]]
    index = ConjunctionIndex()
    if path_kind == "bulk":
        index.build(ads)
    else:
        for ad in ads:
            index.upsert(*ad)
        if path_kind == "merged":
            index.merge()
    scan = ScanIndex()
    for ad in ads:
        scan.upsert(*ad)
    for case in spec["cases"]:
        request = _request(case["request"])
        expected = sorted(case["expected"])
        assert sorted(a for a, e, _ in ads if matches(e, request)) == expected, case
        assert sorted(scan.query(request).ad_ids) == expected, case
        assert sorted(index.query(request).ad_ids) == expected, case


def test_there_are_golden_cases() -> None:
    assert any(p.stem == "paper_example" for p in GOLDEN)
