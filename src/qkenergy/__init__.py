"""qkenergy: symmetric and skew energy of attention heads against exact random baselines."""

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    # qkenergy.analyze_model without importing pandas and the analysis for every `import qkenergy`
    if name == "analyze_model":
        from qkenergy.analysis.analyze import analyze_model

        return analyze_model
    raise AttributeError(f"module 'qkenergy' has no attribute {name!r}")
