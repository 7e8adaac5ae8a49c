"""The serving plane: the ad request, the funnel stages and the decision endpoint."""
