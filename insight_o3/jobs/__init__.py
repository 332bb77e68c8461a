"""One resumable job of items (:mod:`.job`), the controls of a run (:mod:`.controls`), the settings a run
directory's first run fixes (:mod:`.integrity`) and its history of runs (:mod:`.run_history`)."""

__all__ = [
    "controls",
    "integrity",
    "job",
    "run_history",
]
