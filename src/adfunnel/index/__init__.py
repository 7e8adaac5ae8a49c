"""Retrieval: from a request's attributes to the ads whose targeting it satisfies."""

from adfunnel.index.base import AdIndex, Retrieval
from adfunnel.index.scan import ScanIndex

__all__ = ["AdIndex", "Retrieval", "ScanIndex"]
