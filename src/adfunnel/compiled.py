"""Every compiled (numba) kernel of the package, made ready at once.

A kernel compiles on its first call, or loads from numba's on-disk cache (``cache=True``):
tens to hundreds of milliseconds each. :func:`warm_up` pays that at start-up (``serve``
calls it before it answers, the test session before its first test), so no decision,
and no timed property test, pays it on its first call.
"""

from __future__ import annotations

import numpy as np


def warm_up() -> None:
    """Compile or load every kernel with the argument types the package calls it with."""
    from adfunnel import dense
    from adfunnel.auction.draws import unit_array
    from adfunnel.serving import kernels

    kernels.warm_up()
    dense.warm_up()
    unit_array(0, np.zeros(1, dtype=np.int64), 0)
