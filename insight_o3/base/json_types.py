"""The one name for a JSON-like mapping: what a record's ``to_dict`` writes, a parsed request or reply body, a chat
message. A record with known keys has its own type (:mod:`insight_o3.evaluation.schema`,
:mod:`insight_o3.agents.records`, …); this alias is for the mappings that really are open JSON."""

from __future__ import annotations

from typing import Any, TypeAlias

#: A JSON object (string keys, any JSON-able values) as read from or written to a file or an API.
JSONObject: TypeAlias = dict[str, Any]
