"""The shading release: win curves for first-price bid shading as a versioned artifact.

DESIGN.md §How ads are sold, *Automatic bidding* (issue #27). The curves
(:class:`~adfunnel.bidding.shading.ShadingModel`) are fitted off the request path
(:mod:`adfunnel.learn.shading_fit`, ``adfunnel model shading-fit``), written as a
directory like a click-model artifact, registered with ``POST /v1/admin/models`` and
followed by every ad server through the change log (release target ``shading``).

An artifact is a directory holding ``shading.json``: ``format`` (:data:`FORMAT`),
``kind`` ``shading``, ``version`` (a content hash of the model's JSON, so the same fit
gives the same version), ``dataset``, ``metrics`` (what it was fitted on) and
``model`` (:meth:`ShadingModel.to_json`'s document).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from adfunnel.bidding.shading import ShadingModel
from adfunnel.prediction.model import ModelError

FORMAT = 1
FILE = "shading.json"
KIND = "shading"


@dataclass(frozen=True)
class ShadingRelease:
    """Win curves by segment and what they were fitted on."""

    model: ShadingModel
    dataset: str = "served-log"
    metrics: dict[str, Any] = field(default_factory=dict)
    target: str = KIND

    @property
    def version(self) -> str:
        """A content hash of the curves (16 hex characters)."""
        return hashlib.sha256(self.model.to_json().encode()).hexdigest()[:16]

    def save(self, directory: Path) -> None:
        """Write ``shading.json`` (through a temporary file, so a reader never finds it
        half written).

        Raises:
            OSError: the directory cannot be written.
        """
        directory.mkdir(parents=True, exist_ok=True)
        doc = {"format": FORMAT, "kind": KIND, "version": self.version,
               "dataset": self.dataset, "metrics": self.metrics,
               "model": json.loads(self.model.to_json())}
        tmp = directory / (FILE + ".tmp")
        tmp.write_text(json.dumps(doc) + "\n", encoding="utf-8")
        os.replace(tmp, directory / FILE)

    @classmethod
    def load(cls, directory: Path) -> ShadingRelease:
        """Read an artifact written by :meth:`save`.

        Raises:
            ModelError: missing or unreadable file, another format or kind, invalid
                curves, or a version that does not match the content.
        """
        try:
            doc = json.loads((directory / FILE).read_text(encoding="utf-8"))
            if doc.get("format") != FORMAT or doc.get("kind") != KIND:
                raise ValueError(f"format {doc.get('format')!r} kind {doc.get('kind')!r}, "
                                 f"expected {FORMAT} {KIND}")
            release = cls(ShadingModel.from_json(json.dumps(doc["model"])),
                          str(doc.get("dataset", "served-log")), doc.get("metrics") or {})
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ModelError(f"{directory}: not a shading release ({exc})") from None
        if release.version != doc.get("version"):
            raise ModelError(f"{directory}: content does not match version "
                             f"{doc.get('version')!r}")
        return release


def is_shading_artifact(directory: Path) -> bool:
    """Whether ``directory`` holds a shading release (rather than a click model)."""
    return (directory / FILE).is_file()
