"""Post-hoc analysis of finished runs: paired significance, judge agreement (κ), comparison, export."""
