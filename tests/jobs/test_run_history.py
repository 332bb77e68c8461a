"""The run history entry's wall time is elapsed time: a wall clock stepped back (NTP, a VM resumed) never makes it
negative."""

from __future__ import annotations

import time

from insight_o3.endpoints.guard import RunGuard
from insight_o3.jobs.run_history import RunTally


def test_wall_time_survives_the_clock_stepping_back(monkeypatch):
    tally = RunTally()
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() - 3600.0)  # the wall clock steps back an hour
    wall = tally.fields(RunGuard(0.5))["wall_s"]
    assert 0.0 <= wall < 60.0
