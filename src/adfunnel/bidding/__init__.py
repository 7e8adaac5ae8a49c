"""Automatic bidding: the bid from value and the multiplier λ, first-price shading. Pure."""
