"""One typed settings object, validated at start-up with every problem reported at once.

Every key can be overridden by an environment variable ``ADFUNNEL_<KEY>`` (for example
``ADFUNNEL_DATABASE_URL``); command-line flags override both. The keys, their defaults
and their checks are :mod:`adfunnel.settings.model` (``Settings`` is imported from here by
most of the code); this module loads them and reports every problem together.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from pydantic import ValidationError
from pydantic_settings import SettingsError as SourceError

from adfunnel.settings.model import _REQUIRED, Settings


class SettingsError(ValueError):
    """Settings that cannot start a process; ``problems`` lists every one of them."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("invalid settings:\n  " + "\n  ".join(problems))
        self.problems = problems


def load_settings(*, required: Iterable[str] = (), **overrides: object) -> Settings:
    """Settings from defaults, ``ADFUNNEL_*`` environment variables and ``overrides``.

    ``None`` overrides are ignored, so unset CLI flags fall through to the environment.
    ``required``: keys this process needs whatever else is set (``internal_token`` for
    ``adfunnel budget-service``), reported with the other problems.

    Raises:
        SettingsError: listing every invalid key with its problem.
    """
    given = {k: v for k, v in overrides.items() if v is not None}
    held = _REQUIRED.set(frozenset(required))
    try:
        return Settings(**given)  # type: ignore[arg-type]
    except ValidationError as exc:
        problems = [
            f"{'.'.join(str(p) for p in err['loc']) or 'settings'}: {err['msg']}"
            for err in exc.errors()
        ]
        raise SettingsError(problems) from None
    except SourceError as exc:  # a JSON-valued ADFUNNEL_* variable that is not JSON
        found = re.search(r'field "([^"]+)"', str(exc))
        key = found.group(1) if found else "settings"
        raise SettingsError([f"{key}: not valid JSON (ADFUNNEL_{key.upper()})"]) from None
    finally:
        _REQUIRED.reset(held)
