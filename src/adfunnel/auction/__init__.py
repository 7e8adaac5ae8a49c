"""The auction: total value, GSP pricing with quality and reserve, slot filling. Pure."""

from adfunnel.auction.gsp import AuctionResult, Candidate, Rejection, Win, run_auction

__all__ = ["AuctionResult", "Candidate", "Rejection", "Win", "run_auction"]
