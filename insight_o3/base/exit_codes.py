"""The exit codes of every command-line tool (``insight_o3.scripts.*``, ``insight-o3-*``), named once.

====  ==============  =================================================================================
code  name            meaning
====  ==============  =================================================================================
0     OK              everything asked for is done
1     INCOMPLETE      the run finished but some items failed (lost to API errors); rerun to retry them
2     BAD_INPUT       bad usage or bad input (flags, annotation/pool/layout files, settings mismatch)
3     OUTPUT_ERROR    an output file or directory could not be written
4     STOPPED         stopped early on purpose: a 401/403/404, too many failed requests, a budget
5     LOCKED          another run holds the output directory
====  ==============  =================================================================================

A core value (no imports): the run machinery (:mod:`insight_o3.endpoints.guard`, :mod:`insight_o3.jobs.execute`) and
the commands (:mod:`insight_o3.scripts._shared`) both name these codes without importing each other.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    INCOMPLETE = 1
    BAD_INPUT = 2
    OUTPUT_ERROR = 3
    STOPPED = 4
    LOCKED = 5
