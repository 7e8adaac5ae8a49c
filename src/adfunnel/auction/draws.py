"""Order-independent random draws for one decision.

A decision draws one 64-bit seed from its decider's seeded source; every draw it then
makes — a campaign's pacing coin, an ad's tie-break key — is a function of that seed
and the campaign or ad id (the splitmix64 finaliser, Steele et al., "Fast splittable
pseudorandom number generators", OOPSLA 2014). So the outcome does not depend on the
order in which the index returns candidates, and a replay with the same seed makes the
same choices with either index.
"""

from __future__ import annotations

import numpy as np
from numba import njit

_MASK = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
#: Salts keep the draws of different purposes independent for one id.
PACING_COIN = 0x5EED_0001
TIE_BREAK = 0x5EED_0002
EXPLORE = 0x5EED_0003  # whether a decision is in the exploration slice, and its picks
RECALL = 0x5EED_0004  # whether a decision measures the pre-rank's recall


def unit(seed: int, key: int, salt: int) -> float:
    """A uniform draw in [0, 1), determined by ``(seed, key, salt)``."""
    z = (seed ^ salt ^ ((key + 1) * _GOLDEN)) & _MASK
    z = (z + _GOLDEN) & _MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    z ^= z >> 31
    return (z >> 11) / float(1 << 53)


def unit_array(seed: int, keys: np.ndarray, salt: int) -> np.ndarray:
    """:func:`unit` for each of ``keys`` (int64[n] ids ≥ 0): float64[n], bit for bit equal."""
    return _units(unit_base(seed, salt), keys.astype(np.int64, copy=False))


def unit_base(seed: int, salt: int) -> np.uint64:
    """The part of :func:`unit`'s state shared by every key of one (seed, salt), for
    :func:`unit_of`."""
    return np.uint64((seed ^ salt) & _MASK)


_G = np.uint64(_GOLDEN)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_ONE, _S11, _S27, _S30, _S31 = (np.uint64(v) for v in (1, 11, 27, 30, 31))
_SCALE = float(1 << 53)


@njit(cache=True, nogil=True)
def unit_of(base: np.uint64, key: int) -> float:
    """:func:`unit` of ``key`` (≥ 0) in compiled code: ``base`` = :func:`unit_base`.
    Unsigned 64-bit arithmetic wraps, as the masks of :func:`unit` make it."""
    z = base ^ ((np.uint64(key) + _ONE) * _G)
    z = z + _G
    z = (z ^ (z >> _S30)) * _M1
    z = (z ^ (z >> _S27)) * _M2
    z ^= z >> _S31
    return float(z >> _S11) / _SCALE


@njit(cache=True, nogil=True)
def _units(base: np.uint64, keys: np.ndarray) -> np.ndarray:
    out = np.empty(len(keys), np.float64)
    for i in range(len(keys)):
        out[i] = unit_of(base, keys[i])
    return out
