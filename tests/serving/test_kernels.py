"""The compiled kernels of the columnar decision against plain numpy/Python references."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from adfunnel.auction.draws import TIE_BREAK, unit, unit_array, unit_base
from adfunnel.serving.columns import AD_FIELDS, CAMPAIGN_FIELDS
from adfunnel.serving.kernels import (
    R_AD_PAUSED,
    R_NO_FITTING_SLOT,
    campaign_checks,
    candidate_fields,
    decisive_prefix,
    mask_ads,
    paced_out,
)

seeds = st.integers(0, (1 << 64) - 1)


@given(seeds, st.lists(st.integers(0, 1 << 40), max_size=50), st.integers(0, 1 << 32))
def test_unit_array_is_unit_bit_for_bit(seed: int, keys: list[int], salt: int) -> None:
    out = unit_array(seed, np.array(keys, dtype=np.int64), salt)
    assert out.tolist() == [unit(seed, k, salt) for k in keys]


@given(seeds, st.lists(st.tuples(st.integers(0, 10**6), st.floats(0, 1)), max_size=40))
def test_pacing_coin_is_the_draw_against_p(seed: int, rows: list[tuple[int, float]]) -> None:
    cids = np.array([c for c, _ in rows], dtype=np.int64)
    p = np.array([q for _, q in rows], dtype=np.float64)
    out = paced_out(unit_base(seed, 7), cids, p)
    assert out.tolist() == [unit(seed, c, 7) >= q for c, q in rows]


def _ads_and_campaigns(rng: np.random.Generator, n_ads: int, n_c: int
                       ) -> tuple[np.ndarray, np.ndarray]:
    ads = np.zeros(n_ads, AD_FIELDS)
    ads["campaign"] = rng.integers(-1, n_c + 2, n_ads)
    ads["active"] = rng.random(n_ads) < 0.8
    ads["shape"] = rng.integers(0, 5, n_ads)
    ads["version"] = rng.integers(1, 9, n_ads)
    ads["quality"] = rng.integers(-50, 50, n_ads)
    campaigns = np.zeros(n_c, CAMPAIGN_FIELDS)
    campaigns["status"] = rng.integers(-1, 4, n_c)
    campaigns["version"] = rng.integers(1, 9, n_c)
    campaigns["zone"] = rng.integers(0, 3, n_c)
    campaigns["start"] = rng.integers(0, 10, n_c)
    campaigns["end"] = rng.integers(5, 15, n_c)
    campaigns["daypart"] = rng.integers(0, 3, n_c)
    campaigns["charge"] = rng.integers(1, 10**6, n_c)
    campaigns["daily"] = rng.integers(-1, 10**7, n_c)
    campaigns["lifetime"] = rng.integers(-1, 10**7, n_c)
    campaigns["bid_type"] = rng.integers(0, 3, n_c)
    campaigns["bid"] = rng.integers(1, 10**7, n_c)
    campaigns["advertiser"] = rng.integers(0, 20, n_c)
    return ads, campaigns


@settings(max_examples=60)
@given(st.integers(0, 2**32 - 1))
def test_mask_ads_equals_its_definition(seed: int) -> None:
    rng = np.random.default_rng(seed)
    ads, campaigns = _ads_and_campaigns(rng, 300, 60)
    ids = rng.integers(0, len(ads), 200)
    shape_reason = rng.choice(np.array([0, 0, R_NO_FITTING_SLOT, 3, 4], dtype=np.int8), 4)
    counts = np.zeros(8, np.int64)
    keep, camp, ver, big = mask_ads(ids, ads, campaigns, shape_reason, counts, 1 << 26)
    want: list[int] = []
    tally = np.zeros(8, np.int64)
    for a in ids.tolist():
        c = int(ads["campaign"][a])
        if not 0 <= c < len(campaigns) or campaigns["status"][c] < 0:
            continue
        if not ads["active"][a]:
            tally[R_AD_PAUSED] += 1
            continue
        sh = int(ads["shape"][a])
        r = int(shape_reason[sh]) if sh < len(shape_reason) else R_NO_FITTING_SLOT
        if r:
            tally[r] += 1
            continue
        want.append(a)
    assert keep.tolist() == want and not big
    assert camp.tolist() == ads["campaign"][want].tolist()
    assert ver.tolist() == ads["version"][want].tolist()
    assert counts.tolist() == tally.tolist()
    shape, quality, bid_type, bid, adv = candidate_fields(keep, camp, ads, campaigns)
    assert shape.tolist() == ads["shape"][want].tolist()
    assert quality.tolist() == ads["quality"][want].tolist()
    assert bid.tolist() == campaigns["bid"][camp].tolist()
    assert bid_type.tolist() == campaigns["bid_type"][camp].tolist()
    assert adv.tolist() == campaigns["advertiser"][camp].tolist()


@settings(max_examples=60)
@given(st.integers(0, 2**32 - 1))
def test_campaign_checks_equal_their_definition(seed: int) -> None:
    rng = np.random.default_rng(seed)
    _, campaigns = _ads_and_campaigns(rng, 1, 50)
    campaigns["status"] = np.abs(campaigns["status"])
    camp = rng.integers(0, 50, 150)
    dayparts = rng.random((3, 168)) < 0.7
    ordinals = rng.integers(0, 15, 3).astype(np.int32)
    hours = rng.integers(0, 168, 3).astype(np.int16)
    status_reason = np.array([0, 5, 6, 7], dtype=np.int8)
    scratch = np.full(64, -1, np.int64)
    uc, inverse, cver, verdict, local, charge, budgets = campaign_checks(
        camp, scratch, campaigns, dayparts, ordinals, hours, status_reason, 8, 9)
    assert (scratch == -1).all()
    first = sorted(set(camp.tolist()), key=camp.tolist().index)
    assert uc.tolist() == first
    assert uc[inverse].tolist() == camp.tolist()
    for j, c in enumerate(first):
        rec = campaigns[c]
        z = int(rec["zone"])
        want = int(status_reason[rec["status"]])
        if not want and not rec["start"] <= ordinals[z] <= rec["end"]:
            want = 8
        if not want and not dayparts[rec["daypart"], hours[z]]:
            want = 9
        assert (verdict[j], local[j], cver[j]) == (want, ordinals[z], rec["version"])
        assert (charge[j], *budgets[j].tolist()) == (rec["charge"], rec["daily"],
                                                     rec["lifetime"])


def _reference_prefix(eligible: np.ndarray, total: np.ndarray, ids: np.ndarray,
                      camp: np.ndarray, adv: np.ndarray, keep: int, need: int,
                      seed: int) -> tuple[list[int], int]:
    """The numpy form the kernel replaced: argpartition cut, lexsort, a walk."""
    while True:
        chosen = eligible
        if len(eligible) > keep:
            part = np.argpartition(-total[eligible], keep - 1)[:keep]
            chosen = eligible[total[eligible] >= total[eligible[part]].min()]
        ties = unit_array(seed, ids[chosen], TIE_BREAK)
        ranked = chosen[np.lexsort((ties, -total[chosen]))]
        seen_c: set[int] = set()
        seen_a: set[int] = set()
        end = None
        for j, i in enumerate(ranked.tolist()):
            if camp[i] in seen_c or adv[i] in seen_a:
                continue
            seen_c.add(int(camp[i]))
            seen_a.add(int(adv[i]))
            if len(seen_c) == need:
                end = j
                break
        if end is not None or len(chosen) == len(eligible):
            prefix = ranked if end is None else ranked[: end + 1]
            return prefix.tolist(), len(chosen)
        keep *= 4


@settings(max_examples=150)
@given(st.integers(0, 2**32 - 1), st.integers(1, 40), st.integers(2, 5),
       st.integers(1, 300), st.integers(1, 12))
def test_decisive_prefix_equals_the_sorted_ranking(seed: int, keep: int, need: int, n: int,
                                                   distinct: int) -> None:
    rng = np.random.default_rng(seed)
    ids = rng.permutation(10 * n)[:n].astype(np.int64)
    total = rng.integers(0, distinct, n).astype(np.float64) / 7.0  # many ties
    camp = rng.integers(0, max(2, n // 3), n).astype(np.int64)
    adv = rng.integers(0, max(2, n // 6), n).astype(np.int64)
    eligible = np.flatnonzero(rng.random(n) < 0.8)
    prefix, kept = decisive_prefix(eligible, total, ids, camp, adv, keep, need,
                                   unit_base(seed, TIE_BREAK))
    assert (prefix.tolist(), kept) == _reference_prefix(eligible, total, ids, camp, adv,
                                                        keep, need, seed)
