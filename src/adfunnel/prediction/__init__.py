"""Click and conversion prediction."""
