"""The built-in agents of ``evaluate --agent`` by name, each with its one-line description, and the oracle crops a
single model can be given (``--oracle_crops``).

They live apart from the agent modules (:mod:`insight_o3.agents`), whose ``SPEC`` takes its name and description
from here, so that building ``evaluate``'s parser lists the agents without loading one (its ``--help`` starts in a
blink); the registry (:mod:`insight_o3.evaluation.agent_registry`) builds each agent from its module's ``SPEC``.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "BUILTIN_AGENTS",
    "DEEPEYES",
    "INSIGHT_O3",
    "INSIGHT_V",
    "MINI_O3",
    "OPENSEARCH_VL",
    "ORACLE_CROPS",
    "PIXEL_REASONER",
    "SINGLE_MODEL",
    "BuiltinAgent",
]


@dataclass(frozen=True)
class BuiltinAgent:
    """A built-in agent's ``name`` (``evaluate --agent NAME``) and its one-line ``description`` (what ``--help``
    says of it: the text before the first ``:`` or ``,``)."""

    name: str
    description: str


SINGLE_MODEL = BuiltinAgent(
    "single_model", "one model answers from the (resized) image and the question (the released evaluate.py)"
)
INSIGHT_O3 = BuiltinAgent("insight_o3", "vReasoner (--model) + vSearcher (--vsearcher_model), the paper's system")
DEEPEYES = BuiltinAgent(
    "deepeyes", "DeepEyes: image_zoom_in_tool calls in <tool_call> JSON, its released V* evaluation loop"
)
MINI_O3 = BuiltinAgent(
    "mini_o3",
    "Mini-o3: <grounding> calls in relative coordinates on the image or an observation, its verl "
    "validation rollout (sampled: run --num_trials 32 for its Avg@32)",
)
PIXEL_REASONER = BuiltinAgent(
    "pixel_reasoner",
    "Pixel-Reasoner: crop_image_normalized calls in <tool_call> JSON (Qwen-Agent's Nous prompt) on the "
    "image or an earlier crop, its released vLLM evaluation loop",
)
OPENSEARCH_VL = BuiltinAgent(
    "opensearch_vl",
    "OpenSearch-VL: the Visual Investigation Agent with its tools (crop, enhancement, layout parsing, "
    "retrieval; --tool_set all adds visit and python_interpreter), its released inference loop",
)
INSIGHT_V = BuiltinAgent(
    "insight_v",
    "Insight-V: a reasoning agent writes a <thoughts> chain (--model), a summary agent judges it and "
    "answers (--summary_model, the same model and endpoint by default), its released two-agent inference",
)

#: Every built-in agent by name (the registry builds exactly these).
BUILTIN_AGENTS: dict[str, BuiltinAgent] = {
    a.name: a for a in (SINGLE_MODEL, INSIGHT_O3, DEEPEYES, MINI_O3, PIXEL_REASONER, OPENSEARCH_VL, INSIGHT_V)
}

#: What ``--oracle_crops`` can give a single model (:mod:`insight_o3.agents.oracle` cuts them; paper Table 6).
ORACLE_CROPS = ("target_layouts",)
