"""One resumable run of items: the run directory it holds (:mod:`.run_directory`: lock, card, history entry, logs;
the card's store, :mod:`.card_store`), the work over its items (:mod:`.execute`, with its clients, :mod:`.clients`,
and budget, :mod:`.budget`; the records of steps whose failed items are retried, :mod:`.retried`), the controls of
a run (:mod:`.controls`), the settings a run directory's first run fixes (:mod:`.integrity`) and its history of
runs (:mod:`.run_history`)."""

__all__ = [
    "budget",
    "card_store",
    "clients",
    "controls",
    "execute",
    "integrity",
    "retried",
    "run_directory",
    "run_history",
]
