"""The campaign store's errors: what a write or a read of the store can fail with.

The API maps them to HTTP answers (``adfunnel.api.errors``): :class:`NotFound` 404,
:class:`VersionConflict` and :class:`AlreadyExists` 409, :class:`InvalidChange` 422.
"""

from __future__ import annotations


class StoreError(Exception):
    """Base of the campaign store's errors."""


class NotFound(StoreError, LookupError):
    """No ``entity`` with id ``entity_id`` (HTTP 404)."""

    def __init__(self, entity: str, entity_id: int | str) -> None:
        super().__init__(f"no {entity} with id {entity_id}")
        self.entity = entity
        self.entity_id = entity_id


class VersionConflict(StoreError):
    """The record's version is not the ``expected`` one: someone wrote first (HTTP 409)."""

    def __init__(self, entity: str, entity_id: int, expected: int, current: int) -> None:
        super().__init__(
            f"{entity} {entity_id} is at version {current}, not the expected {expected}"
        )
        self.entity = entity
        self.entity_id = entity_id
        self.expected = expected
        self.current = current


class AlreadyExists(StoreError):
    """A record with this caller-chosen id exists already (HTTP 409)."""

    def __init__(self, entity: str, entity_id: str) -> None:
        super().__init__(f"{entity} {entity_id!r} already exists")
        self.entity = entity
        self.entity_id = entity_id


class InvalidChange(StoreError, ValueError):
    """A value that breaks a domain rule; ``field`` names it (HTTP 422).

    ``problems`` lists every ``(field, problem)`` found at once (the first is ``field``,
    ``problem``); build one from several with :meth:`of`.
    """

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem
        self.problems: tuple[tuple[str, str], ...] = ((field, problem),)

    @classmethod
    def of(cls, problems: list[tuple[str, str]]) -> InvalidChange:
        """One error carrying every problem of ``problems`` (at least one)."""
        first = cls(*problems[0])
        first.problems = tuple(problems)
        if len(problems) > 1:
            first.args = ("; ".join(f"{f}: {p}" for f, p in problems),)
        return first

