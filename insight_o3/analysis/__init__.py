"""Post-hoc analysis of finished runs: paired significance, judge agreement (κ), comparison, export."""

__all__ = [
    "agreement",
    "comparison",
    "export",
    "kappa",
    "run_records",
    "significance",
]
