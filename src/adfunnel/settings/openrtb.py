"""The OpenRTB bidder endpoint's settings (``POST /openrtb2/bid``, :mod:`adfunnel.openrtb`).

A base of :class:`adfunnel.settings.Settings` (its fields are the same ``ADFUNNEL_*``
keys). Our bids are in the deployment's ``currency``; ``openrtb_exchange_rates`` converts
an imp's ``bidfloorcur`` into it. The exchange keys are secrets: never in a repr or a
log line; from ``ADFUNNEL_OPENRTB_EXCHANGE_KEYS`` (JSON) or a file
(``openrtb_exchange_keys_file``: a JSON object ``{"exchange name": "key"}``, read once
at start, like the token secret's file).
"""

from __future__ import annotations

import json
import re
from decimal import Decimal
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings

#: Shortest exchange key accepted (characters).
MIN_EXCHANGE_KEY_CHARS = 16
_CURRENCY = re.compile(r"[A-Z]{3}")
_EXCHANGE_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")


class OpenRtbSettings(BaseSettings):
    """OpenRTB endpoint settings; units in the names."""

    #: other currencies' rates: deployment-currency units per 1 unit of that currency
    #: (``{"EUR": "1.08"}`` on a USD deployment); a floor in a currency neither the
    #: deployment's nor listed here gets no bid for its imp
    openrtb_exchange_rates: dict[str, Decimal] = {}
    #: what bills an OpenRTB impression: the exchange's billing notice (``burl``) or the
    #: impression beacon in the ad markup (``beacon``); the other never bills
    openrtb_bills_on: Literal["burl", "beacon"] = "burl"
    #: exchange name -> key; when any is set, ``POST /openrtb2/bid`` needs the header
    #: ``x-openrtb-key`` holding one of them (401 without, 403 with another)
    openrtb_exchange_keys: dict[str, str] = Field(default={}, repr=False)
    #: a JSON file of more exchange keys (the same object), read at start
    openrtb_exchange_keys_file: str | None = None
    #: taken off ``tmax`` for the network between the exchange and us, milliseconds
    openrtb_network_margin_ms: int = Field(default=10, ge=0, le=1_000)

    @field_validator("openrtb_exchange_rates")
    @classmethod
    def _rates(cls, v: dict[str, Decimal]) -> dict[str, Decimal]:
        for code, rate in v.items():
            if not _CURRENCY.fullmatch(code):
                raise ValueError(f"{code!r} is not an ISO 4217 code (three capitals)")
            if not rate.is_finite() or rate <= 0:
                raise ValueError(f"the rate of {code} must be a positive number")
        return v

    @field_validator("openrtb_exchange_keys")
    @classmethod
    def _keys(cls, v: dict[str, str]) -> dict[str, str]:
        return check_exchange_keys(v)

    @model_validator(mode="after")
    def _keys_from_file(self) -> OpenRtbSettings:
        path = self.openrtb_exchange_keys_file
        if path is not None:
            self.openrtb_exchange_keys = check_exchange_keys(
                {**read_exchange_keys(Path(path)), **self.openrtb_exchange_keys})
        return self


def check_exchange_keys(keys: dict[str, str]) -> dict[str, str]:
    """``keys`` once every name is 1-64 of ``[A-Za-z0-9_.-]``, every key at least
    :data:`MIN_EXCHANGE_KEY_CHARS` characters, and no key given to two exchanges (a
    request's key names its exchange: ``exchange`` targeting, reports).

    Raises:
        ValueError: naming the exchange, never the key.
    """
    seen: dict[str, str] = {}
    for name, key in keys.items():
        if not _EXCHANGE_NAME.fullmatch(name):
            raise ValueError(f"exchange name {name!r}: 1-64 of [A-Za-z0-9_.-]")
        if not isinstance(key, str) or len(key) < MIN_EXCHANGE_KEY_CHARS:
            raise ValueError(f"the key of {name} must be at least "
                             f"{MIN_EXCHANGE_KEY_CHARS} characters")
        if key in seen:
            raise ValueError(f"exchanges {seen[key]} and {name} have the same key: "
                             "one key names one exchange")
        seen[key] = name
    return keys


def read_exchange_keys(path: Path) -> dict[str, str]:
    """The ``{"exchange name": "key"}`` object in the file at ``path``.

    Raises:
        ValueError: unreadable, not a JSON object of strings, or a key too short (the
            message names the path and the exchange, never a key).
    """
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"openrtb_exchange_keys_file {path}: {type(exc).__name__}") from None
    if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
        raise ValueError(f"openrtb_exchange_keys_file {path}: must be a JSON object of "
                         "exchange name -> key")
    return check_exchange_keys(data)
