"""Benchmark of the conjunction index against brute force, measured in the same run.

``run_index_bench(ads, workload, queries, seed)`` builds a :class:`ConjunctionIndex`
over ``ads`` generated ads, runs ``queries`` requests and returns::

    {"ads", "workload", "build_s", "bytes_per_ad", "rss_bytes_per_ad", "p50_us", "p99_us",
     "candidates_mean", "truncated_share", "brute_force_ratio", "brute_force_cpu_p50_us",
     "brute_force_measured_ads", "brute_force_extrapolated", ...}

- ``build_s``: seconds of :meth:`ConjunctionIndex.build` (DNF compilation + columns);
  generating the expressions is not counted.
- ``bytes_per_ad``: bytes of the index's numpy arrays per ad; ``rss_bytes_per_ad``
  the process RSS growth during the build per ad (includes the key dictionary and
  the compiled-template cache the build discards).
- ``p50_us``/``p99_us``: single-thread wall-clock latency of ``query(request)``
  (limit 10,000); ``cpu_p50_us``/``cpu_p99_us`` the thread CPU time of the same
  queries (robust when other processes share the cores; ``load_avg_1m`` says how
  busy the machine was).
- Brute force (:class:`ScanIndex`) is *measured* on the first
  ``brute_force_measured_ads`` = min(ads, ``brute_force_ads``, default 100,000) ads
  (``brute_force_measured_cpu_p50_us``). Above that it is *extrapolated*, linearly per
  ad (a scan's cost is linear in the ads it scans): ``brute_force_extrapolated`` is then
  true and ``brute_force_cpu_p50_us`` (the figure at ``ads``) is the measured p50 ×
  ads ÷ measured ads. ``brute_force_ratio``: that ÷ the index's CPU p50 — measured
  only where ``brute_force_extrapolated`` is false.

Workloads (attribute names need not be in ``ATTRIBUTES``: the index accepts any):

- ``go``: 4 multi-valued ∈ fields (interests, audiences, language, slot_size) with
  0–2, 0–4, 0–9, 0–29 values per ad drawn from 0..199; queries carry 0–9, 0–4,
  0–2, 0–1 values.
- ``paper``: 26 attributes ``a0``..``a25``, values 0..99, 1–6 terms per ad, 80 % ∈
  and 20 % ∉; queries assign one value to every attribute.
- ``real``: targeting built from the attribute distributions of the iPinYou log
  ``ipinyou/dlf_2259/train.log.txt`` (region, city, slot size, user tags, user
  agent, exchange, domain) with ~10–50 term values per ad, a few broad ads and
  some OR-ed audience alternatives; requests are the log's rows. The data folder is
  ``data_dir``, else found as the rest of the code finds it
  (:func:`adfunnel.data.data_dir`: ``$ADFUNNEL_DATA_DIR``, else ``shared/data``
  beside the checkout); without the log a uniform stand-in is used and reported as
  ``"source": "fallback"``.

Ads share targeting the way ads of one ad group do: at most ``MAX_TEMPLATES``
distinct expressions, each ad drawing one (and its own static score).
"""

from __future__ import annotations

import gc
import os
import random
import resource
import time
from collections import Counter as Tally
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from adfunnel.data import data_dir as shared_data_dir
from adfunnel.index.conjunction import ConjunctionIndex
from adfunnel.index.scan import ScanIndex
from adfunnel.sim.ipinyou import default_logs, iter_log, split_useragent
from adfunnel.targeting.evaluate import RequestAttributes
from adfunnel.targeting.expr import All, Any_, Expr, In, NotIn

#: Most distinct targeting expressions in one generated workload (ads share them).
MAX_TEMPLATES = 200_000
#: Ads over which brute force is timed by default (above: extrapolated per ad).
BRUTEFORCE_ADS = 100_000
WORKLOADS = ("go", "paper", "real")

Request = dict[str, frozenset[str]]

# iPinYou region ids (provinces); a city id belongs to the nearest region id below it.
_REGIONS = [1, 2, 3, 15, 27, 40, 55, 65, 79, 80, 94, 106, 124, 134, 146, 164, 183, 201, 216,
            238, 253, 275, 276, 298, 308, 325, 333, 344, 359, 368, 374, 393, 394, 395]  # fmt: skip


def _vals(rng: random.Random, pool: list[str], lo: int, hi: int) -> frozenset[str]:
    return frozenset(rng.sample(pool, rng.randint(lo, hi)))


# ---- go --------------------------------------------------------------------------

_GO_ATTRS = ("interests", "audiences", "language", "slot_size")
_GO_AD = ((0, 2), (0, 4), (0, 9), (0, 29))
_GO_QUERY = ((0, 9), (0, 4), (0, 2), (0, 1))


def _go(rng: random.Random, n_templates: int, n_queries: int) -> tuple[list[Expr], list[Request]]:
    pool = [str(v) for v in range(200)]
    exprs: list[Expr] = []
    while len(exprs) < n_templates:
        terms = [
            In(a, _vals(rng, pool, lo, hi)) for a, (lo, hi) in zip(_GO_ATTRS, _GO_AD, strict=True)
        ]
        terms = [t for t in terms if t.values]
        if terms:
            exprs.append(All(tuple(terms)))
    reqs = []
    for _ in range(n_queries):
        req = {
            a: _vals(rng, pool, lo, hi) for a, (lo, hi) in zip(_GO_ATTRS, _GO_QUERY, strict=True)
        }
        reqs.append({a: v for a, v in req.items() if v})
    return exprs, reqs


# ---- paper -----------------------------------------------------------------------

_PAPER_ATTRS = [f"a{i}" for i in range(26)]


def _paper(
    rng: random.Random, n_templates: int, n_queries: int
) -> tuple[list[Expr], list[Request]]:
    pool = [str(v) for v in range(100)]
    exprs: list[Expr] = []
    for _ in range(n_templates):
        attrs = rng.sample(_PAPER_ATTRS, rng.randint(1, 6))
        terms: list[Expr] = [
            (In if rng.random() < 0.8 else NotIn)(a, _vals(rng, pool, 1, 4)) for a in attrs
        ]
        exprs.append(terms[0] if len(terms) == 1 else All(tuple(terms)))
    reqs = [{a: frozenset({rng.choice(pool)}) for a in _PAPER_ATTRS} for _ in range(n_queries)]
    return exprs, reqs


# ---- real ------------------------------------------------------------------------


def _log_rows(data_dir: Path) -> list[Request]:
    """Requests from the rows of the iPinYou training log, in file order (the only file
    read by this module, through :mod:`adfunnel.sim.ipinyou`)."""
    train, _test = default_logs(data_dir)
    rows: list[Request] = []
    for row in iter_log(train):
        _device, os_name, browser = split_useragent(row.useragent)
        req: Request = {
            "geo.country": frozenset({"CN"}),
            "geo.region": frozenset({row.region}),
            "geo.city": frozenset({row.city}),
            "exchange": frozenset({row.exchange}),
            "domain": frozenset({row.domain}),
            "slot_size": frozenset({f"{row.width}x{row.height}"}),
            "os": frozenset({os_name}),
            "browser": frozenset({browser}),
        }
        if row.usertags:
            req["interests"] = frozenset(row.usertags)
        rows.append(req)
    return rows


def _fallback_rows(rng: random.Random) -> list[Request]:
    rows = []
    for _ in range(2000):
        region = rng.choice(_REGIONS)
        rows.append(
            {
                "geo.country": frozenset({"CN"}),
                "geo.region": frozenset({str(region)}),
                "geo.city": frozenset({str(region + rng.randint(0, 10))}),
                "exchange": frozenset({str(rng.randint(1, 3))}),
                "domain": frozenset({f"d{rng.randint(0, 999)}"}),
                "slot_size": frozenset({rng.choice(["300x250", "728x90", "1000x90", "250x250"])}),
                "os": frozenset({rng.choice(["windows", "mac"])}),
                "browser": frozenset({rng.choice(["ie", "chrome", "firefox", "other"])}),
                "interests": frozenset(str(10000 + rng.randint(0, 70)) for _ in range(6)),
            }
        )
    return rows


def _real(
    rng: random.Random, n_templates: int, n_queries: int, data_dir: str | None
) -> tuple[list[Expr], list[Request], str]:
    try:
        # the shared data folder raises FileNotFoundError (an OSError) when there is none
        root = Path(data_dir) if data_dir else shared_data_dir("ipinyou")
        rows, source = _log_rows(root), "ipinyou/dlf_2259"
    except OSError:
        rows, source = _fallback_rows(rng), "fallback"
    tallies: dict[str, Tally[str]] = {}
    for r in rows:
        for a, vs in r.items():
            tallies.setdefault(a, Tally()).update(vs)
    # values weighted by how often the log shows them (popular ones targeted more often);
    # sorted, so the workload does not depend on the process's string hash seed
    weighted = {a: (sorted(t), [t[v] for v in sorted(t)]) for a, t in tallies.items()}

    def pick(attr: str, lo: int, hi: int) -> frozenset[str]:
        vals, w = weighted[attr]
        n = min(len(vals), rng.randint(lo, hi))
        out: set[str] = set()
        while len(out) < n:
            out.update(rng.choices(vals, w, k=n - len(out)))
        return frozenset(out)

    cities = [str(c) for c in range(4, 400)]
    exprs: list[Expr] = []
    for _ in range(n_templates):
        roll = rng.random()
        if roll < 0.03:  # broad: a country or an exchange, maybe a domain block list
            broad: list[Expr] = [In("geo.country", frozenset({"CN"}))]
            if rng.random() < 0.5:
                broad.append(NotIn("domain", pick("domain", 5, 30)))
            exprs.append(broad[0] if len(broad) == 1 else All(tuple(broad)))
            continue
        terms: list[Expr] = []
        g = rng.random()
        if g < 0.35:
            terms.append(In("geo.region", pick("geo.region", 1, 1) | _vals(rng, _REGION_S, 0, 6)))
        elif g < 0.7:
            terms.append(In("geo.city", pick("geo.city", 1, 8) | _vals(rng, cities, 0, 20)))
        else:
            terms.append(In("geo.country", frozenset({"CN"})))
        if rng.random() < 0.6:
            terms.append(In("slot_size", pick("slot_size", 1, 4)))
        if rng.random() < 0.4:
            terms.append(In("exchange", pick("exchange", 1, 2)))
        if rng.random() < 0.25:
            terms.append(In("browser", pick("browser", 1, 3)))
        if rng.random() < 0.15:
            terms.append(NotIn("os", frozenset({"mac"})))
        if rng.random() < 0.4:
            terms.append(NotIn("domain", pick("domain", 3, 25)))
        r = rng.random()
        if r < 0.55:
            terms.append(In("interests", pick("interests", 2, 15)))
        elif r < 0.7:  # one of two audiences: two conjunctions
            terms.append(
                Any_(
                    (
                        In("interests", pick("interests", 1, 5)),
                        In("audiences", _vals(rng, _AUD, 1, 5)),
                    )
                )
            )
        exprs.append(All(tuple(terms)))
    reqs = []
    for _ in range(n_queries):
        req = dict(rng.choice(rows))
        if rng.random() < 0.4:  # the log covers one province: move some requests elsewhere
            city = rng.randint(4, 399)
            region = max(r for r in _REGIONS if r <= city)
            req["geo.region"], req["geo.city"] = frozenset({str(region)}), frozenset({str(city)})
        if rng.random() < 0.3:
            req["audiences"] = _vals(rng, _AUD, 1, 3)
        reqs.append(req)
    return exprs, reqs, source


_REGION_S = [str(r) for r in _REGIONS]
_AUD = [f"aud{i}" for i in range(500)]


# ---- harness ---------------------------------------------------------------------


def _rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * resource.getpagesize()
    except OSError:
        return 0


def _ads(exprs: list[Expr], n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    gen = np.random.default_rng(seed)
    return gen.integers(0, len(exprs), size=n), gen.lognormal(0.0, 1.0, size=n)


def _stream(exprs: list[Expr], tmpl: list[int], scores: list[float], n: int) -> Iterator[Any]:
    return zip(range(n), map(exprs.__getitem__, tmpl[:n]), scores[:n], strict=True)


def _time_queries(
    index: Any, reqs: list[RequestAttributes]
) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """Wall-clock and thread-CPU microseconds per query, and the ads each returned."""
    wall, cpu, counts = [], [], []
    for req in reqs:
        c0, t0 = time.thread_time(), time.perf_counter()
        r = index.query(req)
        wall.append(time.perf_counter() - t0)
        cpu.append(time.thread_time() - c0)
        counts.append(len(r.ad_ids))
    return np.array(wall) * 1e6, np.array(cpu) * 1e6, counts


def _postings(seg: Any) -> int:
    """∈ and ∉ entries of a segment, those stored as bitmap rows included."""
    bits = int(np.bitwise_count(seg.in_bits).sum()) + int(np.bitwise_count(seg.not_bits).sum())
    return len(seg.in_enc) + len(seg.not_conj) + bits


def run_index_bench(
    ads: int, workload: str, queries: int = 1000, seed: int = 1, data_dir: str | None = None,
    brute_force_ads: int = BRUTEFORCE_ADS,
) -> dict[str, Any]:
    """Build an index of ``ads`` generated ads, time ``queries`` requests; return the figures.

    ``brute_force_ads``: most ads the brute-force scan is timed on (see module docstring).

    Raises:
        ValueError: unknown ``workload``, ``ads`` < 1 or ``brute_force_ads`` < 1.
    """
    if brute_force_ads < 1:
        raise ValueError("brute_force_ads must be at least 1")
    if workload not in WORKLOADS:
        raise ValueError(f"workload must be one of {WORKLOADS}, got {workload!r}")
    if ads < 1:
        raise ValueError("ads must be at least 1")
    rng = random.Random(seed)
    n_templates = min(ads, MAX_TEMPLATES)
    source = "generated"
    if workload == "go":
        exprs, reqs = _go(rng, n_templates, queries)
    elif workload == "paper":
        exprs, reqs = _paper(rng, n_templates, queries)
    else:
        exprs, reqs, source = _real(rng, n_templates, queries, data_dir)
    tmpl_arr, scores_arr = _ads(exprs, ads, seed)
    tmpl, scores = tmpl_arr.tolist(), scores_arr.tolist()
    del tmpl_arr, scores_arr

    index = ConjunctionIndex()
    gc.collect()
    rss0 = _rss_bytes()
    t0 = time.perf_counter()
    index.build(_stream(exprs, tmpl, scores, ads))
    build_s = time.perf_counter() - t0
    gc.collect()
    rss_growth = _rss_bytes() - rss0
    snap = index._snap
    n_conj = snap.main.n_conjunctions

    _time_queries(index, reqs[: min(50, len(reqs))])  # warm-up
    lat, cpu, counts = _time_queries(index, reqs)

    n_scan = min(ads, brute_force_ads)
    scan = ScanIndex()
    scan.build(_stream(exprs, tmpl, scores, n_scan))
    scan_reqs = reqs[: max(5, min(30, queries))]
    _, scan_cpu, _ = _time_queries(scan, scan_reqs)
    del scan
    scan_measured = float(np.percentile(scan_cpu, 50))
    scan_p50 = scan_measured * ads / n_scan  # = measured when n_scan == ads
    p50 = float(np.percentile(lat, 50))
    cpu_p50 = float(np.percentile(cpu, 50))
    return {
        "ads": ads,
        "workload": workload,
        "source": source,
        "templates": len(exprs),
        "conjunctions": n_conj,
        "postings": _postings(snap.main),
        "build_s": round(build_s, 3),
        "bytes_per_ad": round(index.nbytes() / ads, 1),
        "rss_bytes_per_ad": round(max(rss_growth, 0) / ads, 1),
        "queries": len(reqs),
        "p50_us": round(p50, 1),
        "p99_us": round(float(np.percentile(lat, 99)), 1),
        "max_us": round(float(lat.max()), 1),
        "cpu_p50_us": round(cpu_p50, 1),
        "cpu_p99_us": round(float(np.percentile(cpu, 99)), 1),
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "candidates_mean": round(float(np.mean(counts)), 1),
        "truncated_share": round(float(np.mean([c >= 10_000 for c in counts])), 3),
        "brute_force_measured_ads": n_scan,
        "brute_force_measured_cpu_p50_us": round(scan_measured, 1),
        "brute_force_extrapolated": n_scan < ads,
        "brute_force_cpu_p50_us": round(scan_p50, 1),
        "brute_force_ratio": round(scan_p50 / cpu_p50, 1) if cpu_p50 > 0 else None,
    }
