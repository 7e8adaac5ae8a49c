"""adfunnel: an ad server for owned-and-operated inventory.

See README.md for the quick start and ../shared/DESIGN.md for the architecture.
"""

__version__ = "0.1.0"
