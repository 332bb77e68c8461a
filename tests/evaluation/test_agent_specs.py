"""Each agent module declares itself (its ``SPEC``: name, protocol version, description, image handling, session) and
the registry lists exactly those: adding an agent is one module, the registry one line, and its name and description
one entry of the catalog that ``evaluate --help`` lists without loading an agent."""

from __future__ import annotations

import importlib
import pkgutil

import insight_o3.agents
from insight_o3.agents.tool_agents import AgentSpec
from insight_o3.evaluation.agent_registry import BUILTIN
from insight_o3.protocol.agent_catalog import BUILTIN_AGENTS


def _specs() -> dict[str, AgentSpec]:
    out = {}
    for m in pkgutil.iter_modules(insight_o3.agents.__path__):
        spec = getattr(importlib.import_module(f"insight_o3.agents.{m.name}"), "SPEC", None)
        if isinstance(spec, AgentSpec):
            assert spec.name not in out, f"two modules declare the agent {spec.name!r}"
            out[spec.name] = spec
    return out


def test_the_registry_lists_the_agent_modules_specs():
    specs = _specs()
    assert set(specs) == set(BUILTIN) == set(BUILTIN_AGENTS) == {
        "single_model", "insight_o3", "deepeyes", "mini_o3", "pixel_reasoner", "opensearch_vl", "insight_v",
    }  # fmt: skip
    for name, spec in specs.items():
        plugin = BUILTIN[name]
        assert BUILTIN_AGENTS[name].description == spec.description  # the one --help shows
        assert (plugin.protocol_version, plugin.description, plugin.alpha) == (
            spec.protocol_version,
            spec.description,
            spec.alpha,
        )
        assert plugin.demo_reply is spec.demo_reply
        if spec.defaults is not None:  # a tool-using session: its protocol's image format, originals kept
            assert (plugin.image_format, plugin.keeps_originals, plugin.resizes) == (
                spec.defaults.image_format,
                True,
                False,
            )
        else:
            assert (plugin.image_format, plugin.keeps_originals, plugin.resizes) == (
                spec.image_format,
                spec.keeps_originals,
                spec.resizes,
            )
