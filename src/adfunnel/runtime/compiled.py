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
    from adfunnel.budget.bulk_view import BulkView, bulk_answers
    from adfunnel.index.matching import warm_up as warm_matching
    from adfunnel.pacing.controller import _compound
    from adfunnel.serving import kernels

    kernels.warm_up()
    dense.warm_up()
    warm_matching()
    unit_array(0, np.zeros(1, dtype=np.int64), 0)
    _compound(np.ones(1), np.ones(1), np.ones(1))
    ids = np.zeros(1, dtype=np.int64)
    view = BulkView()
    view.pacing(ids)
    view.multipliers(ids)
    demand = (np.zeros(1), np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.int32))
    bulk_answers(view.values, ids, np.zeros(1, dtype=np.int32), ids, 0.0,
                 np.zeros(1, dtype=bool), *demand)
