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
    k = keys.astype(np.uint64) + np.uint64(1)
    with np.errstate(over="ignore"):
        z = np.uint64((seed ^ salt) & _MASK) ^ (k * np.uint64(_GOLDEN))
        z = z + np.uint64(_GOLDEN)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z ^= z >> np.uint64(31)
    return (z >> np.uint64(11)).astype(np.float64) / float(1 << 53)
