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

from ..agents import deepeyes, insight_v, mini_o3, opensearch_vl, pixel_reasoner, single_model, solver
from ..agents.tool_agents import AgentDefaults, AgentSpec, DemoSpeaker, SessionFactory
from ..agents.tool_loop import ToolLoopSolver
from ..imaging.images import ImageStore, Resize
from ..protocol.attempt import Solver
from .agent_listing import ENTRY_POINT_GROUP, PluginError, UnknownAgent, agent_names

if TYPE_CHECKING:
    from openai import AsyncOpenAI

    from ..endpoints.guard import RunGuard
    from ..endpoints.rate_limit import AdaptiveLimiter
    from .config import EvaluateConfig


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

    c = ctx.config
    settings = c.single_model
    assert settings is not None
    budget = c.img_max_pixels or None
    return single_model.SingleModelSolver(
        ctx.client,
        c.model,
        ctx.images,
        Resize.fit(budget),
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
    settings = ctx.config.insight_o3
    assert settings is not None
    return solver.InSightO3Solver.build(
        settings,
        ctx.images,
        guard=ctx.guard,
        limiter=ctx.model_limiter,
        vsearcher_limiter=ctx.vsearcher_limiter,
        max_reply_chars=ctx.config.reply_chars,
    )


def plugin_of(spec: AgentSpec, build: Callable[[AgentContext], Solver] | None = None) -> AgentPlugin:
    """The plugin of an agent module's ``SPEC``: a tool-using session's (:func:`tool_agent`), else ``build``'s."""
    if spec.session is not None and spec.defaults is not None:
        return tool_agent(
            spec.name,
            spec.protocol_version,
            spec.description,
            spec.session,
            spec.defaults,
            alpha=spec.alpha,
            demo_reply=spec.demo_reply,
        )
    assert build is not None, f"{spec.name}: an agent without a session needs its build"
    return AgentPlugin(
        name=spec.name,
        protocol_version=spec.protocol_version,
        description=spec.description,
        build=build,
        image_format=spec.image_format,
        alpha=spec.alpha,
        keeps_originals=spec.keeps_originals,
        resizes=spec.resizes,
        demo_reply=spec.demo_reply,
    )


#: The built-in agents: each agent module's ``SPEC``, with the build of those that need the run's settings.
BUILTIN: dict[str, AgentPlugin] = {
    p.name: p
    for p in (
        plugin_of(single_model.SPEC, _single_model),
        plugin_of(solver.SPEC, _insight_o3),
        plugin_of(deepeyes.SPEC),
        plugin_of(mini_o3.SPEC),
        plugin_of(pixel_reasoner.SPEC),
        plugin_of(opensearch_vl.SPEC, _opensearch_vl),
        plugin_of(insight_v.SPEC, _insight_v),
    )
}


def _origin(ep: Any) -> str:
    dist = getattr(ep, "dist", None)
    return f"entry point {ep.name!r} = {ep.value!r} of {ENTRY_POINT_GROUP}" + (
        f" (distribution {dist.name} {dist.version})" if dist is not None else ""
    )


def _cause(e: BaseException) -> str:
    where = f" ({e.filename}, line {e.lineno})" if isinstance(e, SyntaxError) else ""
    return f"{type(e).__name__}: {e}{where}"


def _load(ep: Any) -> AgentPlugin:
    try:
        obj = ep.load()
        plugin = obj() if callable(obj) and not isinstance(obj, AgentPlugin) else obj
    except Exception as e:  # a third party's import or factory: any failure is that plugin's, named
        raise PluginError(f"{_origin(ep)} cannot be loaded: {_cause(e)}") from None
    if not isinstance(plugin, AgentPlugin):
        raise PluginError(f"{_origin(ep)} is not an AgentPlugin (got {type(plugin).__name__})")
    if plugin.name != ep.name:
        raise PluginError(f"{_origin(ep)} names an agent called {plugin.name!r}")
    return plugin


def get_agent(name: str) -> AgentPlugin:
    """The agent called ``name`` (a built-in one wins over a package's of the same name). :class:`PluginError` for
    an installed one that cannot be loaded, or whose name two distributions register (which one is meant is not
    known: neither is taken)."""
    if name in BUILTIN:
        return BUILTIN[name]
    found = {(ep.value, _origin(ep)): ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == name}
    if len(found) > 1:
        raise PluginError(
            f"agent {name!r} is registered more than once: "
            + "; ".join(sorted(origin for _, origin in found))
            + " (uninstall all but one)"
        )
    if found:
        return _load(next(iter(found.values())))
    raise UnknownAgent(f"no agent {name!r}; known: {', '.join(agent_names())}")


def build_solver(name: str, ctx: AgentContext) -> Solver:
    """Agent ``name``'s solver for the run; an installed plugin whose ``build`` raises is a :class:`PluginError`
    naming it (a built-in agent's exception is this package's and goes up as it is)."""
    plugin = get_agent(name)
    if name in BUILTIN:
        return plugin.build(ctx)
    try:
        return plugin.build(ctx)
    except Exception as e:  # a third party's code: its failure, named
        raise PluginError(f"agent plugin {name!r}: build failed: {_cause(e)}") from None
