"""Post-hoc analysis of finished runs: paired significance and power, judge agreement (κ), comparison, export."""

__all__ = [
    "agreement",
    "clusters",
    "comparison",
    "export",
    "kappa",
    "outcomes",
    "paired",
    "power",
    "run_records",
    "settings",
    "significance",
]
