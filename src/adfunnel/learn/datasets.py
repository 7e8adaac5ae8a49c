"""Training examples from the three sources the click model learns from.

Each source becomes :class:`Examples`: one list of ``field=value`` tokens per row (the
model hashes them, :mod:`adfunnel.prediction.model`) and a click label per row.

- ``criteo`` (Criteo Kaggle display challenge; ``../shared/data/criteo``): tab-separated,
  no header: label, 13 integer counts I1..I13, 26 hashed categoricals C1..C26, any of
  them empty. A count becomes its log2 bucket (``I5=b7``), as counts span many orders
  of magnitude.
- ``avazu`` (Avazu Kaggle mobile challenge; ``../shared/data/avazu``): CSV with a
  header ``id,click,hour,…``; ``hour`` is ``YYMMDDHH`` and gives the hour of day and
  the weekday; ``id`` is left out.
- ``served-log``: the served log joined with billed events
  (:func:`adfunnel.learn.query.join_served_with_billed`): one row per rendered winner
  (``impressed``), label ``clicked``, invalid traffic already left out by the join.
  Features: placement, slot position, exchange, domain, ad, campaign, advertiser, bid
  type, hour, the request's attributes, and the crosses placement × ad and placement
  × position (DESIGN.md §The funnel, step 5).
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from adfunnel.prediction.features import candidate_tokens, request_tokens

DATASETS = ("served-log", "criteo", "avazu")


class DatasetError(ValueError):
    """An input that is not the dataset it was said to be (``path:line: problem``)."""


@dataclass(frozen=True)
class Examples:
    """Rows of tokens and their labels (1 = clicked), aligned."""

    tokens: list[list[str]]
    labels: np.ndarray  # int8, shape (rows,)

    def __len__(self) -> int:
        return len(self.tokens)

    def take(self, rows: np.ndarray) -> Examples:
        """The rows at ``rows`` (integer indices), in that order."""
        return Examples([self.tokens[i] for i in rows], self.labels[rows])


TARGETS = ("click", "conversion")


def load(dataset: str, path: Path, *, database_url: str | None = None,
         target: str = "click") -> Examples:
    """Read ``dataset`` from ``path`` (a file; for ``served-log`` its directory, with the
    ledger at ``database_url``). ``target``: ``click`` (every rendered winner, label
    clicked) or ``conversion`` (served-log only: every clicked winner, label converted:
    the pCVR model's rows).

    Raises:
        DatasetError: an unknown dataset, a malformed row, or no rows at all.
        OSError: the input cannot be read.
    """
    if target not in TARGETS:
        raise DatasetError(f"target: one of {', '.join(TARGETS)}, got {target!r}")
    if target == "conversion" and dataset != "served-log":
        raise DatasetError("target conversion: only the served log has conversions")
    if dataset == "criteo":
        found = criteo(path)
    elif dataset == "avazu":
        found = avazu(path)
    elif dataset == "served-log":
        if database_url is None:
            raise DatasetError("served-log: --database-url names the ledger to join with")
        found = served_log(path, database_url, target)
    else:
        raise DatasetError(f"dataset: one of {', '.join(DATASETS)}, got {dataset!r}")
    if not len(found):
        raise DatasetError(f"{path}: no rows")
    return found


def count_bucket(value: int) -> str:
    """A count's log2 bucket: ``n`` for negative, ``b0`` for 0, ``b<k>`` with
    k = floor(log2(value)) + 1 otherwise."""
    if value < 0:
        return "n"
    return f"b{0 if value == 0 else int(math.log2(value)) + 1}"


def criteo(path: Path) -> Examples:
    """Criteo rows (see the module doc): the challenge's tab-separated file, or a CSV
    with a ``label,I1,…,C26`` header (counts may be written as ``260.0``).

    Raises:
        DatasetError: a row without 40 columns, or a label or count that is no integer.
    """
    tokens, labels = [], []
    with path.open(encoding="utf-8", newline="") as f:
        first = f.readline()
        has_header = first.startswith("label")
        rows = csv.reader(f) if has_header else _tab_rows(first, f)
        for n, cols in enumerate(rows, 2 if has_header else 1):
            if len(cols) != 40:
                raise DatasetError(f"{path}:{n}: expected 40 columns, got {len(cols)}")
            try:
                labels.append(_label(cols[0]))
                row = [f"I{k}={count_bucket(_count(v))}" for k, v in enumerate(cols[1:14], 1)
                       if v]
            except ValueError as exc:
                raise DatasetError(f"{path}:{n}: {exc}") from None
            row += [f"C{k}={v}" for k, v in enumerate(cols[14:], 1) if v]
            tokens.append(row)
    return Examples(tokens, np.asarray(labels, dtype=np.int8))


def _tab_rows(first: str, rest: Iterable[str]) -> Iterable[list[str]]:
    yield first.rstrip("\n").split("\t")
    for line in rest:
        yield line.rstrip("\n").split("\t")


def _count(text: str) -> int:
    """An integer count, also when written as a float with no fraction (``260.0``)."""
    try:
        return int(text)
    except ValueError:
        value = float(text)
        if not value.is_integer():
            raise ValueError(f"count must be an integer, got {text!r:.20}") from None
        return int(value)


#: The Avazu columns, for a file without its header line.
AVAZU_COLUMNS = [
    "id", "click", "hour", "C1", "banner_pos", "site_id", "site_domain", "site_category",
    "app_id", "app_domain", "app_category", "device_id", "device_ip", "device_model",
    "device_type", "device_conn_type", "C14", "C15", "C16", "C17", "C18", "C19", "C20", "C21",
]


def avazu(path: Path) -> Examples:
    """Avazu rows (see the module doc); a file without the header line is read with the
    challenge's columns (:data:`AVAZU_COLUMNS`).

    Raises:
        DatasetError: a row of the wrong width, or a bad label or hour.
    """
    tokens, labels = [], []
    with path.open(encoding="utf-8", newline="") as f:
        first = f.readline()
        has_header = first.startswith("id,")
        names = first.strip().split(",") if has_header else AVAZU_COLUMNS
        if has_header and not {"click", "hour"} <= set(names):
            raise DatasetError(f"{path}: expected a CSV header with click and hour")
        rows = csv.reader(f) if has_header else csv.reader([first, *f])
        for n, cols in enumerate(rows, 2 if has_header else 1):
            if len(cols) != len(names):
                raise DatasetError(f"{path}:{n}: expected {len(names)} columns, "
                                   f"got {len(cols)}")
            rec = dict(zip(names, cols, strict=True))
            try:
                labels.append(_label(rec["click"]))
                at = datetime.strptime(rec["hour"], "%y%m%d%H")
            except ValueError as exc:
                raise DatasetError(f"{path}:{n}: {exc}") from None
            row = [f"{k}={v}" for k, v in rec.items() if k not in ("id", "click", "hour")]
            row += [f"hour={at.hour}", f"weekday={at.weekday()}"]
            tokens.append(row)
    return Examples(tokens, np.asarray(labels, dtype=np.int8))


def served_log(directory: Path, database_url: str, target: str = "click") -> Examples:
    """Rendered winners of the served log under ``directory``, labelled by the ledger's
    click rows at ``database_url`` (``target`` conversion: clicked winners, labelled by
    its conversion rows).

    Raises:
        sqlalchemy.exc.SQLAlchemyError, duckdb.Error: the reads failed.
    """
    from adfunnel.db import make_engine
    from adfunnel.learn.query import billed_events, join_served_with_billed

    engine = make_engine(database_url)
    try:
        joined = join_served_with_billed(directory, billed_events(engine))
    finally:
        engine.dispose()
    return served_examples(joined.to_pylist(), target)


def served_examples(rows: Iterable[Mapping[str, Any]], target: str = "click") -> Examples:
    """Examples from joined served-log rows: those ``impressed``, labelled ``clicked``;
    for ``target`` conversion those ``clicked``, labelled ``converted``."""
    shown, label = ("impressed", "clicked") if target == "click" else ("clicked", "converted")
    tokens, labels = [], []
    for r in rows:
        if not r.get(shown):
            continue
        labels.append(1 if r.get(label) else 0)
        tokens.append(served_tokens(r))
    return Examples(tokens, np.asarray(labels, dtype=np.int8))


def served_tokens(r: Mapping[str, Any]) -> list[str]:
    """The tokens of one served winner: its request's and its own (the request path
    builds the same from :func:`request_tokens` and :func:`candidate_tokens`)."""
    attributes = r.get("attributes") or {}
    if isinstance(attributes, str):
        attributes = json.loads(attributes)
    elif isinstance(attributes, list):  # an Arrow map comes back as (key, value) pairs
        attributes = dict(attributes)
    return (request_tokens(r.get("placement"), r.get("position"), r.get("exchange"),
                           r.get("domain"), r.get("hour"), attributes)
            + candidate_tokens(r.get("placement"), r.get("ad_id"), r.get("campaign_id"),
                               r.get("advertiser_id"), r.get("bid_type")))


def _label(text: str) -> int:
    if text not in ("0", "1"):
        raise ValueError(f"label must be 0 or 1, got {text!r:.20}")
    return int(text)
