"""Shared test set-up."""

from hypothesis import settings

# Property tests draw the same examples on every run (CI included), so a
# failure is reproducible and never depends on the day's random draw.
settings.register_profile("qkenergy", derandomize=True, deadline=None)
settings.load_profile("qkenergy")
