"""The names of the agents ``evaluate --agent`` can run, built-in and installed, listed without loading any agent,
and the errors of an unknown or unusable one; apart from :mod:`insight_o3.evaluation.agent_registry` (which loads
and builds them) so that building ``evaluate``'s parser loads no agent."""

from __future__ import annotations

from importlib.metadata import entry_points

from ..protocol.agent_catalog import BUILTIN_AGENTS

__all__ = ["ENTRY_POINT_GROUP", "PluginError", "UnknownAgent", "agent_names"]

ENTRY_POINT_GROUP = "insight_o3.agents"


class UnknownAgent(KeyError):
    """No agent of that name (the message lists the known ones)."""

    def __str__(self) -> str:
        return str(self.args[0])


class PluginError(ValueError):
    """An installed agent plugin that cannot be used: its entry point fails to import (a syntax error, a missing
    attribute, an exception at import), its factory or ``build`` raises, it is not an
    :class:`~insight_o3.evaluation.agent_registry.AgentPlugin`, or two distributions register its name. The message
    names the entry point, its distribution and the cause."""


def agent_names() -> list[str]:
    """Every agent's name: the built-in ones, then those of installed packages (not loaded)."""
    installed = {ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)} - set(BUILTIN_AGENTS)
    return sorted(BUILTIN_AGENTS) + sorted(installed)
