"""The bare ASGI beacon handlers read the query and headers as Starlette's Request does."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from starlette.datastructures import QueryParams

from adfunnel.tracking.http import query_value

parts = st.text(alphabet="ab.t=&%+-_2F0x", max_size=12)


@given(st.lists(st.tuples(st.sampled_from(["t", "x", "tt", ""]), parts), max_size=5),
       st.sampled_from(["t", "x"]))
def test_query_value_equals_starlettes(pairs: list[tuple[str, str]], name: str) -> None:
    raw = "&".join(f"{k}={v}" if k else v for k, v in pairs)
    scope = {"query_string": raw.encode("latin-1")}
    assert query_value(scope, name) == QueryParams(raw).get(name)


def test_a_token_is_read_without_the_decoder_and_with_it() -> None:
    token = "eyJhIjoxfQ.c2ln-_"
    assert query_value({"query_string": f"t={token}".encode()}, "t") == token
    assert query_value({"query_string": b"t=eyJhIjoxfQ%2Ec2ln-_"}, "t") == "eyJhIjoxfQ.c2ln-_"
    assert query_value({"query_string": b""}, "t") is None
    assert query_value({"query_string": b"x=1"}, "t") is None
