"""The serving tests' embedded app (in-memory SQLite, manual clock) for these tests."""

from tests.serving.conftest import budget_mode, client, runtime

__all__ = ["budget_mode", "client", "runtime"]
