"""The columnar decider's distinct-campaigns helper equals the sort-based answer."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from adfunnel.serving.fast import _Distinct


@given(st.lists(st.lists(st.integers(0, 3_000), min_size=1, max_size=60), min_size=1,
                max_size=4))
def test_first_order_equals_unique_in_first_seen_order(batches: list[list[int]]) -> None:
    distinct = _Distinct()  # one scratch array reused across calls, as in a decider
    for batch in batches:
        ids = np.array(batch, dtype=np.int64)
        uc, inverse = distinct.first_order(ids)
        _, first = np.unique(ids, return_index=True)
        assert uc.tolist() == ids[np.sort(first)].tolist()
        assert uc[inverse].tolist() == batch
