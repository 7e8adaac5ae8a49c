"""Reading wrk's report (the overload benchmark's C load generator)."""

from __future__ import annotations

import pytest

from adfunnel.bench.overload import parse_wrk

WRK_OUTPUT = """Running 5s test @ http://127.0.0.1:8080/v1/ads:select
  1 threads and 1000 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency   120.50ms   50.20ms   1.20s    80.00%
    Req/Sec     6.00k     1.00k    8.00k    70.00%
  Latency Distribution
     50%  850.00us
     75%  140.00ms
     90%  180.00ms
     99%    1.25s
  29850 requests in 5.00s, 3.10MB read
  Socket errors: connect 0, read 2, write 0, timeout 12
Requests/sec:   5970.00
Transfer/sec:    620.00KB
"""


def test_percentiles_in_every_unit_and_the_counts() -> None:
    assert parse_wrk(WRK_OUTPUT) == {"answers": 29850, "answers_per_s": 5970.0,
                                     "p50_ms": 0.85, "p99_ms": 1250.0, "errors": 14}


def test_output_without_a_latency_distribution_is_refused() -> None:
    with pytest.raises(RuntimeError, match="unreadable"):
        parse_wrk(WRK_OUTPUT.replace("99%", "98%"))
