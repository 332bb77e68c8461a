"""One resumable job of items (:mod:`.job`) and the settings a run directory's first run fixes
(:mod:`.integrity`)."""
