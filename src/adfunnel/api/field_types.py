"""Field types the API's bodies share, and the base of every input body (pydantic v2).

Input models (``_In``) forbid unknown fields. Money fields are strict integers of
micros: a float (``1.0``, ``NaN``), a bool or a string is refused, never coerced. Dates
are ``YYYY-MM-DD`` strings of a day the domain can represent. ``landing_url`` is
validated as a plain string and never normalised: an IRI (non-ASCII host, path or query)
is stored as given and must have a URI form (:func:`adfunnel.campaigns.landing.to_uri`,
used by the click redirect).
"""

from __future__ import annotations

import re
from datetime import date
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, Strict

from adfunnel.campaigns.landing import landing_url_problem, uri_problem
from adfunnel.campaigns.schedule import is_valid_zone
from adfunnel.clock import day_problem

_MAX_MICROS = 2**63 - 1
_ISO_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")

#: Non-negative integer micros (budgets).
Micros = Annotated[int, Strict(), Field(ge=0, le=_MAX_MICROS)]
#: Positive integer micros (bids).
PositiveMicros = Annotated[int, Strict(), Field(gt=0, le=_MAX_MICROS)]
Version = Annotated[int, Strict(), Field(ge=1)]
Name = Annotated[str, Strict(), Field(min_length=1, max_length=200)]


def _iso_date(value: Any) -> Any:
    if isinstance(value, str) and not _ISO_DATE.match(value):
        raise ValueError("must be a date YYYY-MM-DD")
    if not isinstance(value, str | date):
        raise ValueError("must be a date YYYY-MM-DD")
    return value


def _zone(value: str) -> str:
    if not is_valid_zone(value):
        raise ValueError(f"unknown time zone {value!r} (expected an IANA name)")
    return value


def _url(value: str) -> str:
    # an IRI is accepted and stored as given; it must have a URI form for the redirect
    problem = landing_url_problem(value) or uri_problem(value)
    if problem:
        raise ValueError(problem)
    return value


def _not_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be blank")
    return value


def _in_domain(value: date) -> date:
    problem = day_problem(value)  # the domain adds days to it (flights, local days)
    if problem:
        raise ValueError(problem)
    return value


#: A calendar day the domain can represent (also the report ranges' ``from``/``to``).
DomainDay = Annotated[date, AfterValidator(_in_domain)]
LocalDate = Annotated[DomainDay, BeforeValidator(_iso_date)]
TimeZone = Annotated[str, Strict(), AfterValidator(_zone)]
LandingUrl = Annotated[str, Strict(), AfterValidator(_url)]
Text = Annotated[str, Strict(), Field(min_length=1, max_length=500), AfterValidator(_not_blank)]
Size = Annotated[int, Strict(), Field(gt=0, le=100_000)]


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid")



class VersionIn(_In):
    """Optional body of pause/resume: the version the client last read."""

    version: Version | None = None

