"""The layout's rules, read from the source: imports point down the ladder, no two modules
import each other, no file over 600 lines, benchmarks live in bench/ only.

The ladder is data (``LADDER``): a deliberate change of the layout is one line here and one in
README's "Layout". Rooms on one rung may import each other, but the rooms' graph has no loop.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "adfunnel"

# Lowest rung first. A room is a top-level module or package of adfunnel. The first rung is
# the foundation: values and plumbing every room may use (money, the clock, settings, the
# database, the data directory, the API error body, logs and metrics, API keys).
LADDER: list[set[str]] = [
    {"money", "clock", "settings", "db", "data", "json_depth", "secret_file", "periodic", "dense",
     "http_errors", "body_limit", "internal_auth", "observability", "auth", "geo"},
    {"targeting"},
    {"campaigns"},
    {"index", "auction", "bidding", "pacing", "frequency", "prediction", "ivt"},
    {"budget", "forecast"},
    {"events"},
    {"tracking", "billing"},
    {"serving"},
    {"api", "ui", "learn", "web", "openrtb"},
    {"sim", "runtime", "migrations"},
    {"bench"},
    {"cli", "__main__"},
]
RUNG = {room: level for level, rooms in enumerate(LADDER) for room in rooms}
MAX_LINES = 600


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in PACKAGE.rglob("*.py")}


MODULES = _modules()


def _imports(path: Path) -> set[str]:
    """Every adfunnel module ``path`` imports, anywhere in the file (function bodies too)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        for name in names:
            while name and name not in MODULES:
                name = name.rpartition(".")[0]
            if name.startswith("adfunnel."):
                found.add(name)
    return found


GRAPH = {name: _imports(path) - {name} for name, path in MODULES.items()}


def _room(module: str) -> str:
    return module.split(".")[1]


def test_every_room_is_on_the_ladder() -> None:
    rooms = {_room(m) for m in MODULES if m != "adfunnel"}
    assert sorted(rooms - set(RUNG)) == []


def test_imports_point_down_the_ladder() -> None:
    upward = sorted(
        f"{module} -> {target}"
        for module, targets in GRAPH.items() if module != "adfunnel"
        for target in targets
        if RUNG.get(_room(target), -1) > RUNG.get(_room(module), -1)
    )
    assert upward == []


def test_no_two_modules_import_each_other() -> None:
    pairs = sorted(
        f"{a} <-> {b}" for a, targets in GRAPH.items() for b in targets
        if a < b and a in GRAPH.get(b, set())
    )
    assert pairs == []


def test_the_rooms_form_no_loop() -> None:
    edges: dict[str, set[str]] = defaultdict(set)
    for module, targets in GRAPH.items():
        if module == "adfunnel":
            continue
        for target in targets:
            if _room(target) != _room(module):
                edges[_room(module)].add(_room(target))
    loops: list[str] = []
    state: dict[str, int] = {}

    def visit(room: str, path: list[str]) -> None:
        state[room] = 1
        for nxt in sorted(edges[room]):
            if state.get(nxt) == 1:
                loops.append(" -> ".join([*path[path.index(nxt):], nxt]))
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[room] = 2

    for room in sorted(edges):
        if room not in state:
            visit(room, [room])
    assert loops == []


@pytest.mark.parametrize(
    ("rule", "importers"),
    [("cli", {"__main__"}), ("bench", {"cli"}), ("sim", {"bench", "cli"})],
)
def test_who_may_import_the_top_rooms(rule: str, importers: set[str]) -> None:
    offenders = sorted(
        f"{module} -> {target}"
        for module, targets in GRAPH.items() if module != "adfunnel"
        for target in targets
        if _room(target) == rule and _room(module) not in importers | {rule}
    )
    assert offenders == []


def test_no_benchmark_under_a_domain_room() -> None:
    misplaced = sorted(
        m for m in MODULES
        if ("bench" in m.rsplit(".", 1)[-1] or "load" in m.rsplit(".", 1)[-1])
        and _room(m) != "bench" and not m.endswith(("download", "payload", "uploads"))
    )
    assert misplaced == []


def test_no_file_over_the_limit_and_long_ones_say_their_job() -> None:
    too_long, unnamed = [], []
    for name, path in MODULES.items():
        lines = len(path.read_text().splitlines())
        if lines > MAX_LINES:
            too_long.append(f"{name} ({lines})")
        if lines > 400 and not ast.get_docstring(ast.parse(path.read_text())):
            unnamed.append(name)
    assert too_long == []
    assert unnamed == []
