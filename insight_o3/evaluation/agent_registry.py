"""The agents ``evaluate --agent NAME`` can run, and how a third-party package adds one.

An agent is an :class:`AgentPlugin`: a name, the version of the protocol it implements (written to the run
card), how the run's images are encoded, and ``build(context) -> Solver``. The built-in agents are
``single_model`` and ``insight_o3`` (the two modes ``evaluate`` always had: their requests are unchanged), the
Table 1 baselines (``deepeyes``, ``mini_o3``, ``pixel_reasoner``), ``opensearch_vl`` (with the tool layer,
:mod:`insight_o3.tools`) and Insight-V's reasoning + summary agents (``insight_v``); see docs/fidelity.md. A package
adds agents through the entry-point group
:data:`ENTRY_POINT_GROUP`; each entry point names an :class:`AgentPlugin` (or a callable returning one)::

    [project.entry-points."insight_o3.agents"]
    my_agent = "my_package.agent:PLUGIN"

A plugin of the tool-using kind builds a :class:`~insight_o3.agents.tool_loop.ToolLoopSolver` over its own
sans-IO session (:mod:`insight_o3.agents.tool_agents`); :func:`tool_agent` makes that plugin from a session
factory and its defaults.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any

from ..agents import deepeyes, insight_v, mini_o3, opensearch_vl, pixel_reasoner
from ..agents.tool_agents import AgentDefaults, DemoSpeaker, SessionFactory
from ..agents.tool_loop import ToolLoopSolver
from ..imaging.images import ImageStore, Resize
from ..protocol.attempt import Solver

if TYPE_CHECKING:
    from openai import AsyncOpenAI

    from ..endpoints.guard import RunGuard
    from ..endpoints.rate_limit import AdaptiveLimiter
    from .config import EvaluateConfig

ENTRY_POINT_GROUP = "insight_o3.agents"


@dataclass(frozen=True, kw_only=True)
class AgentContext:
    """What an agent's ``build`` gets: the run's settings, the answering model's client (owned by the command),
    the image store, the run's guard and the per-endpoint limiters."""

    config: EvaluateConfig
    client: AsyncOpenAI
    images: ImageStore
    guard: RunGuard
    model_limiter: AdaptiveLimiter | None = None
    vsearcher_limiter: AdaptiveLimiter | None = None


@dataclass(frozen=True, kw_only=True)
class AgentPlugin:
    """One agent. ``image_format``/``alpha``: the run's image store (how views are encoded, how an alpha channel
    becomes RGB); ``keeps_originals``: decoded originals are kept for crops; ``resizes``: the run's image budget
    (``--img_max_pixels``) applies (False: the protocol sends the original image as is); ``demo_reply``: its
    scripted behaviour in the keyless demo."""

    name: str
    protocol_version: str
    description: str
    build: Callable[[AgentContext], Solver]
    image_format: str = "JPEG"
    alpha: str = "drop"
    keeps_originals: bool = False
    resizes: bool = True
    #: how the keyless demo's scripted model speaks this agent's protocol (a zoom, then the answer), so the demo's
    #: endpoints can be evaluated with ``--agent`` and show its crops; None: the scripted model answers as a single
    #: model would
    demo_reply: DemoSpeaker | None = None
    #: whether the agent asks the run's model endpoint (``--model`` at ``--api_base_url``); an agent that answers
    #: without a model (a rule, a lookup, a tool alone) sets False, and that endpoint is neither checked before the
    #: first sample nor needs a key
    calls_model: bool = True


def tool_agent(
    name: str,
    protocol_version: str,
    description: str,
    session: SessionFactory,
    defaults: AgentDefaults,
    alpha: str = "drop",
    demo_reply: DemoSpeaker | None = None,
) -> AgentPlugin:
    """The plugin of a tool-using session: one model endpoint (the run's ``--model``), the protocol's request
    settings under the run's ``--chat_completion_kwargs``; ``alpha``: how the image store makes RGB of an alpha
    channel (:data:`~insight_o3.imaging.images.ALPHA_MODES`); ``demo_reply``: how the keyless demo's scripted model
    speaks the protocol (:class:`~insight_o3.agents.tool_agents.DemoSpeaker`)."""

    def build(ctx: AgentContext) -> Solver:
        c = ctx.config
        return ToolLoopSolver(ctx.client, c.model, ctx.images, session, defaults, dict(c.completion_kwargs))

    return AgentPlugin(
        name=name,
        protocol_version=protocol_version,
        description=description,
        build=build,
        image_format=defaults.image_format,
        alpha=alpha,
        keeps_originals=True,
        resizes=False,
        demo_reply=demo_reply,
    )


def _opensearch_vl(ctx: AgentContext) -> Solver:
    """OpenSearch-VL's agent over the run's toolkit: its images and retrieval record go into the run directory."""
    import functools

    from ..tools.setup import ToolSettings, build_toolkit
    from .config import PluginAgentSettings

    c = ctx.config
    agent = c.agent
    settings = agent.tools if isinstance(agent, PluginAgentSettings) and agent.tools is not None else ToolSettings()
    run = c.run.run_dir
    toolkit = build_toolkit(settings, images_dir=run.tool_images_dir(), store_dir=run.retrieval_store_dir())
    session = functools.partial(opensearch_vl.OpenSearchVLSession, tool_set=settings.tool_set)
    return ToolLoopSolver(
        ctx.client, c.model, ctx.images, session, opensearch_vl.DEFAULTS, dict(c.completion_kwargs), toolkit=toolkit
    )


def _single_model(ctx: AgentContext) -> Solver:
    from ..agents.oracle import oracle_crop_resize, oracle_regions
    from ..agents.single_model import SingleModelSolver

    c = ctx.config
    settings = c.single_model
    assert settings is not None
    budget = c.img_max_pixels or None
    return SingleModelSolver(
        ctx.client,
        c.model,
        ctx.images,
        Resize(max_pixels=budget),
        system_prompt=settings.system_prompt,
        completion_kwargs=dict(c.completion_kwargs),
        image_url_extra=dict(c.image_url_extra),
        separate_trial_requests=c.separate_trial_requests,
        extra_views=oracle_regions if settings.oracle_crops else None,
        extra_resize=oracle_crop_resize(budget) if settings.oracle_crops else None,
    )


def _insight_v(ctx: AgentContext) -> Solver:
    from ..agents.insight_v_solver import InsightVSolver
    from ..endpoints.client import make_client

    c = ctx.config
    settings = c.insight_v
    assert settings is not None
    api = settings.summary_api
    same = (api.base_url, api.api_key) == (c.api.base_url, c.api.api_key)
    summary = make_client(
        api,
        role="summary",
        guard=ctx.guard,
        limiter=ctx.model_limiter if same else None,  # one server, one limit
        max_reply_chars=c.reply_chars,
    )
    kwargs = dict(c.completion_kwargs)  # the run's settings over each agent's released ones
    return InsightVSolver(
        ctx.client,
        c.model,
        summary,
        settings.summary_model,
        ctx.images,
        reasoner_kwargs=kwargs,
        summary_kwargs=kwargs,
        owned=(summary,),
    )


def _insight_o3(ctx: AgentContext) -> Solver:
    from ..agents.solver import InSightO3Solver  # lazy: only InSight-o3 runs need it

    settings = ctx.config.insight_o3
    assert settings is not None
    return InSightO3Solver.build(
        settings,
        ctx.images,
        guard=ctx.guard,
        limiter=ctx.model_limiter,
        vsearcher_limiter=ctx.vsearcher_limiter,
        max_reply_chars=ctx.config.reply_chars,
    )


BUILTIN: dict[str, AgentPlugin] = {
    p.name: p
    for p in (
        AgentPlugin(
            name="single_model",
            protocol_version="insight_o3:evaluate.py",
            description="one model answers from the (resized) image and the question (the released evaluate.py)",
            build=_single_model,
        ),
        AgentPlugin(
            name="insight_o3",
            protocol_version="insight_o3:vreasoner+vsearcher@926d137",
            description="vReasoner (--model) + vSearcher (--vsearcher_model), the paper's system",
            build=_insight_o3,
            alpha="white",
            keeps_originals=True,
        ),
        tool_agent(
            "deepeyes",
            deepeyes.PROTOCOL_VERSION,
            "DeepEyes: image_zoom_in_tool calls in <tool_call> JSON, its released V* evaluation loop",
            deepeyes.DeepEyesSession,
            deepeyes.DEFAULTS,
            alpha="keep",  # the release crops Image.open(path) in the file's own mode
            demo_reply=deepeyes.demo_reply,
        ),
        tool_agent(
            "mini_o3",
            mini_o3.PROTOCOL_VERSION,
            "Mini-o3: <grounding> calls in relative coordinates on the image or an observation, its verl validation "
            "rollout (sampled: run --num_trials 32 for its Avg@32)",
            mini_o3.MiniO3Session,
            mini_o3.DEFAULTS,
            demo_reply=mini_o3.demo_reply,
        ),
        tool_agent(
            "pixel_reasoner",
            pixel_reasoner.PROTOCOL_VERSION,
            "Pixel-Reasoner: crop_image_normalized calls in <tool_call> JSON (Qwen-Agent's Nous prompt) on the image or "
            "an earlier crop, its released vLLM evaluation loop",
            pixel_reasoner.PixelReasonerSession,
            pixel_reasoner.DEFAULTS,
            alpha="white",  # qwen_vl_utils.to_rgb / the release's to_rgb: RGBA pasted on white
            demo_reply=pixel_reasoner.demo_reply,
        ),
        AgentPlugin(
            name="opensearch_vl",
            protocol_version=opensearch_vl.PROTOCOL_VERSION,
            description="OpenSearch-VL: the Visual Investigation Agent with its tools (crop, enhancement, layout "
            "parsing, retrieval; --tool_set all adds visit and python_interpreter), its released inference loop",
            build=_opensearch_vl,
            image_format=opensearch_vl.DEFAULTS.image_format,
            keeps_originals=True,
            resizes=False,
        ),
        AgentPlugin(
            name="insight_v",
            protocol_version=insight_v.PROTOCOL_VERSION,
            description="Insight-V: a reasoning agent writes a <thoughts> chain (--model), a summary agent judges it "
            "and answers (--summary_model, the same model and endpoint by default), its released two-agent inference",
            build=_insight_v,
            image_format="PNG",  # the original file's pixels, as the release hands the file to its image processor
            resizes=False,
        ),
    )
}


class UnknownAgent(KeyError):
    """No agent of that name (the message lists the known ones)."""

    def __str__(self) -> str:
        return str(self.args[0])


def _load(ep: Any) -> AgentPlugin:
    obj = ep.load()
    plugin = obj() if callable(obj) and not isinstance(obj, AgentPlugin) else obj
    if not isinstance(plugin, AgentPlugin):
        raise TypeError(f"entry point {ep.name!r} ({ep.value}) of {ENTRY_POINT_GROUP} is not an AgentPlugin")
    if plugin.name != ep.name:
        raise TypeError(f"entry point {ep.name!r} ({ep.value}) names an agent called {plugin.name!r}")
    return plugin


def agent_names() -> list[str]:
    """Every agent's name: the built-in ones, then those of installed packages (not loaded)."""
    return sorted(BUILTIN) + sorted(ep.name for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name not in BUILTIN)


def get_agent(name: str) -> AgentPlugin:
    """The agent called ``name`` (a built-in one wins over a package's of the same name)."""
    if name in BUILTIN:
        return BUILTIN[name]
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name == name:
            return _load(ep)
    raise UnknownAgent(f"no agent {name!r}; known: {', '.join(agent_names())}")
