"""Retrieval: from a request's attributes to the ads whose targeting it satisfies."""

from adfunnel.index.base import AdIndex, Retrieval
from adfunnel.index.conjunction import ConjunctionIndex
from adfunnel.index.scan import ScanIndex

__all__ = ["AdIndex", "ConjunctionIndex", "Retrieval", "ScanIndex"]
