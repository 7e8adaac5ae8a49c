"""Runs every targeting case in tests/targeting/golden/*.json (add a case without code)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from adfunnel.targeting import matches, parse_expr

CASES = sorted((Path(__file__).parent / "golden").glob("*.json"))


def as_request(raw: dict[str, str | list[str]]) -> dict[str, frozenset[str]]:
    return {k: frozenset(v if isinstance(v, list) else [v]) for k, v in raw.items()}


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_golden_targeting(path: Path) -> None:
    case = json.loads(path.read_text())
    expr = parse_expr(case["expression"])
    for c in case["cases"]:
        assert matches(expr, as_request(c["request"])) is c["match"], c
