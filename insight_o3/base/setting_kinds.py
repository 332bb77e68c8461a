"""The run-integrity kind of a run's setting, declared where the setting is: on a settings record's field
(:func:`kind_field`) or on a command's flag (``insight_o3.scripts._shared.setting``).

:mod:`insight_o3.jobs.integrity` explains what each kind means for a run directory (result settings are fixed by
its first run, operational ones may change, an extent may grow, secrets are never written); an
:class:`~insight_o3.jobs.integrity.Invocation` is given the kinds its settings declare, and a setting that declares
none is refused there (``UnclassifiedSetting``).
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

__all__ = ["Kind", "kind_field", "field_kinds"]


class Kind(enum.Enum):
    """How a setting bears on a run directory's integrity (:mod:`insight_o3.jobs.integrity`)."""

    RESULT = "result"
    OPERATIONAL = "operational"
    EXTENT = "extent"
    SECRET = "secret"


#: The key of a dataclass field's metadata holding ``(kind, setting name or None)``.
KIND_KEY = "insight_o3.setting_kind"


def kind_field(kind: Kind, *, setting: str | None = None, **field_args: Any) -> Any:
    """A dataclass field that is a run's setting of ``kind`` (``setting``: the name a run's settings list it under,
    when not the field's own); ``field_args`` as :func:`dataclasses.field` takes them."""
    return dataclasses.field(metadata={KIND_KEY: (kind, setting)}, **field_args)


def field_kinds(record: Any, prefix: str = "") -> dict[str, Kind]:
    """The kind each field of the dataclass ``record`` (a class or an instance) declares, by the name its settings
    list it under (``prefix`` before it); fields that declare none are left out."""
    out: dict[str, Kind] = {}
    for f in dataclasses.fields(record):
        if KIND_KEY in f.metadata:
            kind, name = f.metadata[KIND_KEY]
            out[prefix + (name or f.name)] = kind
    return out
