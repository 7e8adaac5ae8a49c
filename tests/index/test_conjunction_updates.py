"""Updates while serving, broad ads and truncation."""

from __future__ import annotations

import random
import threading
from unittest import mock

import pytest
from prometheus_client import REGISTRY

from adfunnel.index import ConjunctionIndex, ScanIndex, conjunction
from adfunnel.targeting import All, Expr, In, NotIn, TargetingError, matches, parse_expr

GEOS = ["US", "FR", "DE", "JP"]
GENDERS = ["F", "M"]
INTERESTS = ["cars", "golf", "tech", "food", "travel"]


def _random_expr(rng: random.Random) -> Expr:
    terms: list[Expr] = [In("geo.country", frozenset(rng.sample(GEOS, rng.randint(1, 3))))]
    if rng.random() < 0.5:
        terms.append(In("interests", frozenset(rng.sample(INTERESTS, rng.randint(1, 3)))))
    if rng.random() < 0.4:
        terms.append(NotIn("gender", frozenset({rng.choice(GENDERS)})))
    return All(tuple(terms))


def _random_request(rng: random.Random) -> dict[str, frozenset[str]]:
    req = {"geo.country": frozenset({rng.choice(GEOS)})}
    if rng.random() < 0.8:
        req["gender"] = frozenset({rng.choice(GENDERS)})
    req["interests"] = frozenset(rng.sample(INTERESTS, rng.randint(0, 3)))
    return req


@pytest.mark.slow
def test_concurrent_decisions_while_campaigns_change() -> None:
    """At least 1,000 queries on 4 threads while 50 campaigns are created, edited, removed.

    Every result is compared with brute force over the exact version it read.
    Readers keep going until the writer is done; the writer starts once a reader
    has answered, so reads before, during and after the writes are all checked.
    """
    rng = random.Random(7)
    index = ConjunctionIndex(delta_limit=40)  # small, so merges happen mid-run
    base = {i: (_random_expr(rng), rng.random()) for i in range(300)}
    index.build((a, e, s) for a, (e, s) in base.items())
    states: dict[int, dict[int, tuple[Expr, float]]] = {index.version: dict(base)}
    results: list[tuple[dict[str, frozenset[str]], list[int], int]] = []
    errors: list[BaseException] = []
    done = threading.Event()
    reading = threading.Event()

    def writer() -> None:
        wrng = random.Random(11)
        reading.wait(timeout=30)
        current = dict(base)
        campaigns: dict[int, list[int]] = {}
        try:
            for c in range(50):
                ads = [10_000 + c * 10 + j for j in range(5)]
                items = [(a, _random_expr(wrng), wrng.random()) for a in ads]
                index.upsert_many(items)
                current.update({a: (e, s) for a, e, s in items})
                states[index.version] = dict(current)
                campaigns[c] = ads
                edit = wrng.choice(list(campaigns))
                a = wrng.choice(campaigns[edit])
                e, s = _random_expr(wrng), wrng.random()
                index.upsert(a, e, s)
                current[a] = (e, s)
                states[index.version] = dict(current)
                if c % 3 == 2:
                    gone = campaigns.pop(wrng.choice(list(campaigns)))
                    index.remove_many(gone)
                    for a in gone:
                        current.pop(a, None)
                    states[index.version] = dict(current)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            done.set()

    def reader(seed: int) -> None:
        rrng = random.Random(seed)
        try:
            n = 0
            while n < 250 or not done.is_set():
                req = _random_request(rrng)
                r = index.query(req)
                results.append((req, r.ad_ids, r.version))
                reading.set()
                n += 1
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer)] + [
        threading.Thread(target=reader, args=(s,)) for s in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert len(results) >= 1000
    assert len({v for _, _, v in results}) > 1  # the readers did see writes happen
    for req, got, version in results:
        state = states[version]
        want = sorted(
            (a for a, (e, _) in state.items() if matches(e, req)),
            key=lambda a: (-state[a][1], a),
        )
        assert got == want


def _broad_and_narrow(n_broad: int) -> tuple[ConjunctionIndex, ScanIndex]:
    rng = random.Random(3)
    broad = In("geo.country", frozenset({"US"}))
    narrow = parse_expr(
        {
            "all": [
                {"attr": "geo.country", "in": ["US"]},
                {"attr": "geo.city", "in": ["boise"]},
                {"attr": "interests", "in": ["fly-fishing"]},
                {"attr": "gender", "not_in": ["F"]},
            ]
        }
    )
    ads = [(i, broad, rng.random()) for i in range(n_broad)]
    ads.append((999_999, narrow, 0.99))
    index, scan = ConjunctionIndex(), ScanIndex()
    index.build(ads)
    scan.build(ads)  # one snapshot: upserting one by one copies it each time
    return index, scan


REQUEST = {
    "geo.country": frozenset({"US"}),
    "geo.city": frozenset({"boise"}),
    "interests": frozenset({"fly-fishing", "golf"}),
}


@pytest.mark.slow
def test_narrow_ad_is_not_crowded_out_by_broad_ones() -> None:
    index, scan = _broad_and_narrow(50_000)
    r = index.query(REQUEST, limit=1000)
    assert 999_999 in r.ad_ids and r.truncated
    assert r.ad_ids == scan.query(REQUEST, limit=1000).ad_ids
    # at a limit below its rank, the narrow ad is cut exactly as brute force cuts it
    rank = scan.query(REQUEST, limit=100_000).ad_ids.index(999_999)
    assert 999_999 not in index.query(REQUEST, limit=rank).ad_ids
    assert index.query(REQUEST, limit=rank + 1).ad_ids[-1] == 999_999


def test_truncation_is_counted() -> None:
    index, _ = _broad_and_narrow(100)
    before = REGISTRY.get_sample_value("adfunnel_index_truncated_total") or 0.0
    r = index.query(REQUEST, limit=10)
    assert r.truncated and len(r.ad_ids) == 10
    assert not index.query(REQUEST, limit=101).truncated
    assert REGISTRY.get_sample_value("adfunnel_index_truncated_total") == before + 1


def test_versions_and_noops() -> None:
    index = ConjunctionIndex()
    v0 = index.version
    index.remove(123)
    assert index.version == v0
    index.upsert(1, In("gender", frozenset({"F"})), 1.0)
    assert index.version == v0 + 1 and len(index) == 1
    index.upsert(1, In("gender", frozenset({"M"})), 1.0)
    r = index.query({"gender": frozenset({"M"})})
    assert r.ad_ids == [1] and r.version == v0 + 2
    assert index.query({"gender": frozenset({"F"})}).ad_ids == []
    index.remove(1)
    assert len(index) == 0 and index.query({"gender": frozenset({"M"})}).ad_ids == []


def test_refused_targeting_leaves_index_unchanged() -> None:
    index = ConjunctionIndex()
    index.upsert(1, In("gender", frozenset({"F"})), 1.0)
    v = index.version
    huge = parse_expr(
        {
            "all": [
                {"any": [{"attr": "os", "in": [str(i)]}, {"attr": "browser", "in": [str(i)]}]}
                for i in range(8)
            ]
        }
    )
    with pytest.raises(TargetingError):
        index.upsert_many([(2, In("gender", frozenset({"M"})), 1.0), (3, huge, 1.0)])
    assert index.version == v and len(index) == 1
    with pytest.raises(ValueError):
        index.upsert(4, In("gender", frozenset({"M"})), float("nan"))


def test_background_merge_keeps_writes_made_while_it_runs() -> None:
    """A merge runs on a thread; writes made meanwhile land in the next delta, versions hold."""
    rng = random.Random(5)
    index, scan = ConjunctionIndex(delta_limit=8), ScanIndex()
    base = [(i, _random_expr(rng), rng.random()) for i in range(200)]
    index.build(base)
    scan.build(base)
    gate, entered = threading.Event(), threading.Event()
    real_concat = conjunction.concat_tables

    def slow_concat(a, b):
        entered.set()
        assert gate.wait(timeout=30)
        return real_concat(a, b)

    def check() -> None:
        assert len(index) == len(scan)
        for _ in range(30):
            req = _random_request(rng)
            assert index.query(req).ad_ids == scan.query(req).ad_ids
            assert index.query(req, 5).ad_ids == scan.query(req, 5).ad_ids

    with mock.patch.object(conjunction, "concat_tables", slow_concat):
        for i in range(9):  # the 9th write passes the limit: a merge starts
            ad = (1000 + i, _random_expr(rng), rng.random())
            index.upsert(*ad)
            scan.upsert(*ad)
        assert entered.wait(timeout=30)
        thread = index._merge_thread
        assert thread is not None and thread.is_alive()
        # while it runs: replace main ads and merged-delta ads, add, remove both kinds
        for a in (3, 1001, 2000, 2001):
            ad = (a, _random_expr(rng), rng.random())
            index.upsert(*ad)
            scan.upsert(*ad)
        for a in (4, 1002, 9999):
            index.remove(a)
            scan.remove(a)
        check()
        version = index.version
        gate.set()
        thread.join(timeout=30)
    assert not thread.is_alive()
    assert index.version == version  # the swap changed the layout, not the content
    assert len(index._snap.delta_ads) == 4  # 3, 1001, 2000, 2001: written during the merge
    check()
    index.merge()
    assert index.version == version + 1 and not index._snap.delta_ads
    check()


def test_synchronous_merge_when_asked() -> None:
    rng = random.Random(6)
    index, scan = ConjunctionIndex(delta_limit=4, background_merge=False), ScanIndex()
    for i in range(30):
        ad = (i, _random_expr(rng), rng.random())
        index.upsert(*ad)
        scan.upsert(*ad)
        assert index._merge_thread is None and len(index._snap.delta_ads) <= 4
    for _ in range(30):
        req = _random_request(rng)
        assert index.query(req).ad_ids == scan.query(req).ad_ids
