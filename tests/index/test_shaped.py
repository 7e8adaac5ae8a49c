"""The shape-partitioned index answers as one brute-force index would (all shapes), and
as one over only the asked shapes' ads would (``query_shapes``), through updates."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adfunnel.index import ConjunctionIndex, ScanIndex
from adfunnel.index.shaped import ShapedIndex
from tests.index.test_conjunction_properties import _compiles
from tests.strategies import requests as request_strategy
from tests.strategies import trees

ATTRS = ["geo.country", "interests", "gender"]
VALUES = ["a", "b", "c", "d"]
SHAPES = ["300x250", "728x90", "160x600"]


ads = st.lists(st.tuples(trees(ATTRS, VALUES, max_all=3).filter(_compiles),
                         st.sampled_from([0.0, 1.0, 2.0, 2.0, 5.0]), st.sampled_from(SHAPES)),
               min_size=0, max_size=30)
edits = st.lists(st.tuples(st.integers(0, 40), st.sampled_from(SHAPES), st.booleans()),
                 max_size=10)


@pytest.mark.slow
@settings(max_examples=120, deadline=None)
@given(ads, edits, st.lists(request_strategy(ATTRS, VALUES), min_size=1, max_size=5),
       st.integers(1, 12), st.sets(st.sampled_from(SHAPES)))
def test_shaped_index_equals_brute_force(items, changes, reqs, limit, asked) -> None:
    shape: dict[int, str] = {}
    index = ShapedIndex(shape.__getitem__, ConjunctionIndex)
    for i, (_, _, s) in enumerate(items):
        shape[i] = s
    index.build((i, e, score) for i, (e, score, _) in enumerate(items))
    live = {i: (e, score) for i, (e, score, _) in enumerate(items)}
    for ad_id, new_shape, remove in changes:  # moves between shapes, removals, new ads
        if remove:
            index.remove(ad_id)
            live.pop(ad_id, None)
        elif items:
            e, score, _ = items[ad_id % len(items)]
            shape[ad_id] = new_shape
            index.upsert(ad_id, e, score)
            live[ad_id] = (e, score)
    every, only = ScanIndex(), ScanIndex()
    for ad_id, (e, score) in live.items():
        every.upsert(ad_id, e, score)
        if shape[ad_id] in asked:
            only.upsert(ad_id, e, score)
    assert len(index) == len(live)
    for request in reqs:
        got, want = index.query(request, limit), every.query(request, limit)
        assert (got.ad_ids, got.truncated) == (want.ad_ids, want.truncated)
        part = index.query_shapes(request, sorted(asked), limit)
        want = only.query(request, limit)
        assert part.ad_ids.tolist() == want.ad_ids
        assert len(part.ad_ids) == len(set(part.ad_ids.tolist()))
