"""qkenergy: symmetric and skew energy of attention heads against exact random baselines."""

__version__ = "0.1.0"
