"""The conjunction index returns exactly what the brute-force ScanIndex returns, and a
segment's compiled query what its numpy reference returns."""

from __future__ import annotations

import random
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adfunnel.bench import index as bench
from adfunnel.index import ConjunctionIndex, ScanIndex, segment
from adfunnel.index.numpy_query import match_numpy
from adfunnel.index.segment import Segment
from adfunnel.index.table import TableBuilder
from adfunnel.targeting import TargetingError
from adfunnel.targeting.dnf import compile_dnf
from tests.strategies import requests as request_strategy
from tests.strategies import trees

ATTRS = ["geo.country", "geo.region", "gender", "interests", "age_band", "x.any_name"]
VALUES = ["a", "b", "c", "d", "e"]

exprs = trees(ATTRS, VALUES, max_all=4)
requests = request_strategy(ATTRS, VALUES)
scores = st.sampled_from([0.0, 0.5, 1.0, 2.0, 3.0])


def _compiles(e) -> bool:
    try:
        compile_dnf(e)
    except TargetingError:
        return False
    return True


ads_lists = st.lists(st.tuples(exprs.filter(_compiles), scores), min_size=0, max_size=25)


@settings(max_examples=150, deadline=None)
@given(ads_lists, st.lists(requests, min_size=1, max_size=6), st.integers(1, 30))
def test_bulk_build_equals_scan(ads, reqs, limit) -> None:
    index, scan, merged = ConjunctionIndex(), ScanIndex(), ConjunctionIndex()
    index.build((i, e, s) for i, (e, s) in enumerate(ads))
    with mock.patch.object(segment, "RADIX_MAX_KEYS", 0):  # the other bulk postings path
        merged.build((i, e, s) for i, (e, s) in enumerate(ads))
    for i, (e, s) in enumerate(ads):
        scan.upsert(i, e, s)
    for request in reqs:
        assert merged.query(request).ad_ids == scan.query(request).ad_ids
    # tiny windows so the windowed, early-stopping read is exercised too, and
    # both counting paths: sorting the hits, a count array over the window
    for ratio in (0, 1 << 30):
        with (
            mock.patch.object(segment, "FIRST_WINDOW", 2),
            mock.patch.object(segment, "WINDOW_GROWTH", 2),
            mock.patch.object(segment, "SORT_PATH_RATIO", ratio),
        ):
            for request in reqs:
                for lim in (limit, 10_000):
                    got, want = index.query(request, lim), scan.query(request, lim)
                    assert got.ad_ids == want.ad_ids
                    assert got.truncated == want.truncated


@settings(max_examples=100, deadline=None)
@given(
    ads_lists,
    st.lists(st.tuples(st.integers(0, 30), st.one_of(st.none(), exprs.filter(_compiles)), scores)),
    st.lists(requests, min_size=1, max_size=4),
)
def test_updates_equal_scan(ads, edits, reqs) -> None:
    """Build, then upserts/removes (delta + tombstones, with merges), then compare."""
    with (
        mock.patch.object(segment, "FIRST_WINDOW", 2),
        mock.patch.object(segment, "WINDOW_GROWTH", 2),
    ):
        _updates_equal_scan(ads, edits, reqs)


def _updates_equal_scan(ads, edits, reqs) -> None:
    index, scan = ConjunctionIndex(delta_limit=4), ScanIndex()
    index.build((i, e, s) for i, (e, s) in enumerate(ads))
    for i, (e, s) in enumerate(ads):
        scan.upsert(i, e, s)
    for ad_id, e, s in edits:
        if e is None:
            index.remove(ad_id)
            scan.remove(ad_id)
        else:
            index.upsert(ad_id, e, s)
            scan.upsert(ad_id, e, s)
        assert len(index) == len(scan)
    for request in reqs:
        assert index.query(request).ad_ids == scan.query(request).ad_ids
        assert index.query(request, 3).ad_ids == scan.query(request, 3).ad_ids
    index.merge()
    for request in reqs:
        assert index.query(request).ad_ids == scan.query(request).ad_ids


@settings(max_examples=60, deadline=None)
@given(
    ads_lists,
    st.lists(st.tuples(st.integers(0, 30), st.one_of(st.none(), exprs.filter(_compiles)), scores)),
    st.lists(requests, min_size=1, max_size=4),
    st.sampled_from([1, 4, 1 << 30]),
    st.sampled_from([0, 1 << 30]),
)
def test_bitmap_and_list_postings_equal_scan(ads, edits, reqs, dense, sort_ratio) -> None:
    """Posting groups stored as lists, as bitmaps or mixed; matched by sorting or by bitmaps.

    DENSE_RATIO 1: (almost) every group a list; 1 << 30: every group a bitmap.
    Merges expand the bitmaps back to entries (``Segment.to_table``).
    """
    with (
        mock.patch.object(segment, "DENSE_RATIO", dense),
        mock.patch.object(segment, "SORT_PATH_RATIO", sort_ratio),
        mock.patch.object(segment, "FIRST_WINDOW", 3),
        mock.patch.object(segment, "WINDOW_GROWTH", 3),
        mock.patch.object(segment, "MAX_SCRATCH", 256),  # windows of at most ~64 ids
    ):
        _updates_equal_scan(ads, edits, reqs)
        index, scan = ConjunctionIndex(), ScanIndex()
        index.build((i, e, s) for i, (e, s) in enumerate(ads))
        scan.build((i, e, s) for i, (e, s) in enumerate(ads))
        for request in reqs:
            for lim in (1, 5, 10_000):
                got, want = index.query(request, lim), scan.query(request, lim)
                assert (got.ad_ids, got.truncated) == (want.ad_ids, want.truncated)


@pytest.mark.parametrize("workload", ["go", "paper", "real"])
def test_benchmark_workloads_equal_scan(workload: str, tmp_path) -> None:
    """A few thousand ads of each benchmark workload: bitmaps many words wide, several windows."""
    rng = random.Random(5)
    if workload == "go":
        exprs, reqs = bench._go(rng, 600, 40)
    elif workload == "paper":
        exprs, reqs = bench._paper(rng, 600, 40)
    else:
        exprs, reqs, _ = bench._real(rng, 600, 40, str(tmp_path))  # the uniform stand-in
    ads = [
        (i, exprs[rng.randrange(len(exprs))], rng.choice([0.5, 1.0, rng.random()]))
        for i in range(4000)
    ]
    index, scan = ConjunctionIndex(), ScanIndex()
    index.build(ads)
    scan.build(ads)
    with (
        mock.patch.object(segment, "FIRST_WINDOW", 100),
        mock.patch.object(segment, "MAX_SCRATCH", 20_000),
    ):
        for request in reqs:
            for lim in (30, 10_000):
                got, want = index.query(request, lim), scan.query(request, lim)
                assert (got.ad_ids, got.truncated) == (want.ad_ids, want.truncated)
    index.upsert_many(ads[:50])
    index.remove_many(range(50, 90))
    for a in range(50, 90):
        scan.remove(a)
    for request in reqs[:10]:
        assert index.query(request, 100).ad_ids == scan.query(request, 100).ad_ids


@settings(max_examples=60, deadline=None)
@given(
    ads_lists,
    st.lists(requests, min_size=1, max_size=4),
    st.integers(1, 30),
    st.sampled_from([1, 4, 1 << 30]),
    st.sampled_from([0, 1 << 30]),
)
def test_the_numpy_query_equals_the_compiled_one(ads, reqs, want, dense, sort_ratio) -> None:
    """The numpy reference (:mod:`adfunnel.index.numpy_query`) and the compiled matcher
    read the same windows (one schedule) and answer the same ranks, with and without
    an alive mask, on both paths and both posting forms."""
    with (
        mock.patch.object(segment, "DENSE_RATIO", dense),
        mock.patch.object(segment, "SORT_PATH_RATIO", sort_ratio),
        mock.patch.object(segment, "FIRST_WINDOW", 2),
        mock.patch.object(segment, "WINDOW_GROWTH", 2),
        mock.patch.object(segment, "MAX_SCRATCH", 256),
    ):
        builder = TableBuilder()
        for i, (e, s) in enumerate(ads):
            builder.add(i, builder.template(compile_dnf(e)), s)
        seg = Segment.from_builder(builder)
        alive = np.arange(len(ads)) % 3 != 0
        for request in reqs:
            kids = seg.key_ids_of(request)
            for live in (None, alive):
                np.testing.assert_array_equal(match_numpy(seg, kids, live, want),
                                              seg.match(kids, live, want))
