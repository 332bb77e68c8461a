"""Evaluate a model (or InSight-o3: vReasoner + vSearcher) on a benchmark.

    python -m insight_o3.scripts.evaluate --eval_name "$MODEL/o3_bench" --model "$MODEL" \\
        --api_base_url "$API_BASE_URL" --api_key "$API_KEY" --judge_model gpt-5-nano \\
        --ann_file data/O3-Bench/test/metadata.jsonl --img_dir data/O3-Bench/test [--num_trials 3]

Results go to ``<output_dir>/<eval_name>/`` (see :mod:`insight_o3.evaluation.runner`); rerunning
the same command resumes. API keys come from flags or env vars and are never written anywhere.

Subsets (``--limit``, ``--sample_ids``, ``--categories``) write to ``<eval_name>@subset-<hash>`` so
they are never mistaken for a full run. Every run writes ``run_card.json`` (see
:mod:`insight_o3.evaluation.run_card`); records carry token ``usage`` per role and, with
``--price_file``, ``cost_usd``.

A rerun into the same ``<eval_name>`` resumes only with the settings its first run fixed: a setting that can
change a result (model, judge, prompts, image budget, benchmark file, subset, ...) that differs is refused with
status 2, naming each one (see :mod:`insight_o3.jobs.integrity`); concurrency, rate limits, budgets and other
operational settings may change and are recorded in ``run_card.json``'s ``history``. ``--num_trials`` may grow
(an extension: ``trial_<k>`` added) but not ask for fewer trials than the directory holds (status 2, both counts
named, nothing written; README "Run integrity").

Exit status: 0 done; 2 bad input (or changed settings); 3 an output file could not be written; 4 stopped early: by the API (a 401/403/404 from
the model, judge or vSearcher endpoint, or more than ``--max_failure_ratio`` of the requests failed)
or by a budget (``--max_cost``/``--max_tokens_total``; rerun with a higher budget to resume);
5 another run holds ``<output_dir>/<eval_name>``. Every stop prints one line.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import functools
import json
import logging
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..base.json_types import JSONObject
from ..base.setting_kinds import Kind
from ..base.untrusted import loads
from ..endpoints.defaults import DEFAULT_MAX_RETRIES
from ..evaluation.agent_listing import PluginError, UnknownAgent, agent_names
from ..evaluation.benchmarks import BENCHMARKS, DATA_ROOT_ENV, canonical_name, resolve_layout
from ..evaluation.judge_settings import FLOWS
from ..imaging.geometry import VSEARCHER_EVAL_MAX_PIXELS, api_image_max_pixels
from ..protocol.agent_catalog import BUILTIN_AGENTS, ORACLE_CROPS
from ..protocol.limits import LIMITS
from ..protocol.statuses import JudgeFlow
from ..tools.choices import LAYOUT_BACKENDS, RETRIEVALS, TOOL_SETS
from ._shared import (
    OUTPUT_ROOT,
    ExitCode,
    Flags,
    add_allow_outside_flag,
    add_budget_flags,
    add_cap_flags,
    add_client_flags,
    add_image_budget_flag,
    add_image_cache_flag,
    add_judge_flags,
    add_judge_retries_flag,
    add_key_host_flag,
    add_output_dir,
    add_run_flags,
    add_separate_requests_flag,
    add_vsearcher_flags,
    check_output_names,
    check_run_flags,
    entry_point,
    flag_kinds,
    image_cache_settings,
    new_parser,
    non_empty,
    output_name,
    report_stop,
    run_controls,
    setting,
    setup_logging,
    stop_errors,
)

if TYPE_CHECKING:  # the run's modules: imported by the functions that run it, so that --help loads none of them
    from openai import AsyncOpenAI

    from ..endpoints.guard import RunGuard
    from ..endpoints.preflight import Called
    from ..endpoints.rate_limit import AdaptiveLimiter
    from ..endpoints.usage import CostModel
    from ..evaluation.config import AgentSettings, EvaluateConfig
    from ..imaging.images import ImageStore
    from ..protocol.attempt import Solver
    from ..protocol.sample import Sample
    from ..tools.setup import ToolSettings

log = logging.getLogger("insight_o3.evaluate")
SECRET_ARGS = ("api_key", "judge_api_key", "vsearcher_api_key", "summary_api_key")


def _json_object(name: str) -> Callable[[str], JSONObject]:
    def parse(text: str) -> JSONObject:
        try:
            value = loads(text)
        except json.JSONDecodeError as e:
            raise argparse.ArgumentTypeError(f"{name} is not valid JSON: {e}") from None
        if not isinstance(value, dict):
            raise argparse.ArgumentTypeError(f"{name} must be a JSON object")
        return value

    return parse


def _benchmark_name(text: str) -> str:
    try:
        return canonical_name(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _data_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("data")
    setting(
        g,
        "--benchmark",
        type=_benchmark_name,
        metavar="NAME",
        help=f"use this benchmark's default --ann_file/--img_dir: {', '.join(sorted(BENCHMARKS))} (case, dashes and "
        "spaces do not matter: O3-Bench is o3_bench; see data/README.md)",
        kind=Kind.OPERATIONAL,
    )
    setting(
        g,
        "--data_root",
        default=None,
        help=f"with --benchmark: the folder holding the benchmarks (default: ${DATA_ROOT_ENV}, else ./data; "
        "data/README.md says how to fill it)",
        kind=Kind.OPERATIONAL,
    )
    setting(g, "--ann_file", help="annotation JSONL file", kind=Kind.OPERATIONAL)
    setting(
        g,
        "--img_dir",
        help="directory the annotation's image paths are relative to (and stay inside)",
        kind=Kind.OPERATIONAL,
    )
    add_allow_outside_flag(g)
    # operational, as --sample_ids and --categories: resolved into the result setting subset (RECORDED_KINDS)
    setting(
        g,
        "--limit",
        type=int,
        default=None,
        help="only the first N samples (after the filters below)",
        kind=Kind.OPERATIONAL,
    )
    setting(
        g,
        "--sample_ids",
        nargs="+",
        default=None,
        help="only these samples (question_id values; commas or spaces separate them)",
        kind=Kind.OPERATIONAL,
    )
    setting(
        g,
        "--categories",
        nargs="+",
        default=None,
        help="only these categories (the 'category'/'subset' field; commas or spaces separate them)",
        kind=Kind.OPERATIONAL,
    )


def _agent_line(name: str) -> str:
    """``name`` and the first clause of its description: a built-in agent's from the catalog (no agent is loaded),
    an installed one's from its plugin (an agent that cannot be loaded: its name only)."""
    builtin = BUILTIN_AGENTS.get(name)
    if builtin is not None:
        description = builtin.description
    else:
        from ..evaluation.agent_registry import get_agent

        try:
            description = get_agent(name).description
        except (UnknownAgent, PluginError):
            return name
    return f"{name} ({description.split(':')[0].split(',')[0]})"


def _model_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("model")
    setting(
        g,
        "--agent",
        default=None,
        help="the agent answering (default: single_model, insight_o3 with --vsearcher_model): "
        + "; ".join(_agent_line(n) for n in agent_names())
        + ". Installed packages add agents (entry points 'insight_o3.agents'); see README 'Baselines'",
        kind=Kind.RESULT,
    )
    setting(
        g,
        "--eval_name",
        type=output_name,
        help="results go to <output_dir>/<eval_name> (with --benchmark the default is <model>/<benchmark>, "
        "<model>+<agent>/<benchmark> for a baseline agent; required with --ann_file)",
        kind=Kind.OPERATIONAL,
    )
    setting(g, "--model", required=True, type=non_empty, kind=Kind.RESULT)
    setting(g, "--api_base_url", help="default: $OPENAI_BASE_URL", kind=Kind.OPERATIONAL)
    setting(g, "--api_key", help="default: $OPENAI_API_KEY", kind=Kind.SECRET)
    add_image_budget_flag(
        g,
        default=None,
        help="resize budget in pixels; 0 = no limit (default: the paper's, 1280*1280 when the model "
        "name contains 'gpt', else 3500*3500)",
    )
    setting(g, "--sys_prompt", choices=("model_default", "think"), default="model_default", kind=Kind.RESULT)
    setting(
        g,
        "--chat_completion_kwargs",
        type=_json_object("--chat_completion_kwargs"),
        default=None,
        help='request settings (default: \'{"max_completion_tokens": 16384}\'; in InSight-o3 mode per '
        'vReasoner turn \'{"max_completion_tokens": 2048, "temperature": 1.0, '
        '"reasoning_effort": null}\', the fork\'s)',
        kind=Kind.RESULT,
    )
    setting(
        g,
        "--image_url_extra_settings",
        type=_json_object("--image_url_extra_settings"),
        default={"detail": "high"},
        kind=Kind.RESULT,
    )
    add_client_flags(g, max_retries=DEFAULT_MAX_RETRIES)


def _judge_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("judge")
    add_judge_flags(
        g,
        model_help="the judge model (default: gpt-5-nano, the paper's)",
        url_help="default: $JUDGE_API_BASE_URL, then the model's endpoint (--api_base_url or $OPENAI_BASE_URL; said "
        "in a warning)",
        key_help="default: $JUDGE_API_KEY, then the model's key (--api_key or $OPENAI_API_KEY) where the judge is on "
        "the model's host (see --allow_key_to_other_host)",
    )
    setting(
        g,
        "--max_answer_length",
        type=int,
        default=1000,
        help="longer answers are left-cropped before they reach the judge",
        kind=Kind.RESULT,
    )
    setting(
        g,
        "--judge_flow",
        choices=FLOWS,
        default=None,
        help="extract: the released evaluate.py (extraction prompt, then verification); verify: the "
        "fork's in-loop check (boxed span, then qa_verify). Default: extract for a single model, "
        "verify in InSight-o3 mode (as the paper's numbers were produced)",
        kind=Kind.RESULT,
    )
    setting(
        g,
        "--judge_cache",
        action="store_true",
        help="ask identical judge prompts (same judge model, prompt and settings) once per run, e.g. "
        "a response repeated across trials (default off: one judge request per attempt, as the "
        "released harness; rejudge caches by default)",
        kind=Kind.RESULT,
    )
    add_judge_retries_flag(g)
    add_key_host_flag(g)


def _rate_flags(g: Flags) -> None:
    add_run_flags(
        g,
        concurrency=128,
        failure_ratio=False,
        image_workers=False,
        progress=False,
        concurrency_help="samples in flight, and the starting request concurrency per endpoint: halved on a "
        "429 storm, grown back by one after that many successes in a row",
    )
    setting(
        g, "--rpm", type=float, default=None, help="requests per minute to the model endpoint", kind=Kind.OPERATIONAL
    )
    setting(g, "--tpm", type=float, default=None, help="tokens per minute to the model endpoint", kind=Kind.OPERATIONAL)
    setting(
        g,
        "--judge_rpm",
        type=float,
        default=None,
        help="requests per minute to the judge endpoint",
        kind=Kind.OPERATIONAL,
    )
    setting(
        g,
        "--judge_tpm",
        type=float,
        default=None,
        help="tokens per minute to the judge endpoint",
        kind=Kind.OPERATIONAL,
    )
    setting(
        g,
        "--no_adaptive_concurrency",
        action="store_true",
        help="a fixed concurrency (429s are left to the SDK's retries alone)",
        kind=Kind.OPERATIONAL,
    )


def _run_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("run")
    add_output_dir(g, default=os.path.join(OUTPUT_ROOT, "eval"), help="results go to <output_dir>/<eval_name>")
    # an extent: more trials add trial_<k> directories (each trial's settings the same); fewer are refused
    setting(g, "--num_trials", type=int, default=1, kind=Kind.EXTENT)
    _rate_flags(g)
    add_budget_flags(g, what="samples")
    add_cap_flags(g)
    add_separate_requests_flag(g)
    setting(
        g,
        "--retry_failed",
        action="store_true",
        help="query again the pairs whose record is a critical (API) failure",
        kind=Kind.OPERATIONAL,
    )
    setting(
        g,
        "--image_cache_mb",
        type=int,
        default=128,
        help="memory for encoded images shared by questions/trials (samples run grouped by image, "
        "so a small cache still encodes each image once)",
        kind=Kind.OPERATIONAL,
    )
    add_run_flags(g, concurrency=None)  # --max_failure_ratio, --image_workers, --no_progress
    add_image_cache_flag(g)


def _insight_o3_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("InSight-o3 (vReasoner = --model, vSearcher below)")
    setting(g, "--vsearcher_model", type=non_empty, help="enables InSight-o3 mode", kind=Kind.RESULT)
    setting(g, "--vsearcher_api_base_url", help="default: $VSEARCHER_API_BASE_URL", kind=Kind.OPERATIONAL)
    setting(g, "--vsearcher_api_key", help="default: $VSEARCHER_API_KEY", kind=Kind.SECRET)
    add_vsearcher_flags(g, default_max_pixels=VSEARCHER_EVAL_MAX_PIXELS)
    setting(g, "--max_vsearch_calls", type=int, default=LIMITS.max_search_calls, kind=Kind.RESULT)
    setting(
        g,
        "--vsearcher_chat_completion_kwargs",
        type=_json_object("--vsearcher_chat_completion_kwargs"),
        default={},
        help='extra kwargs of every vSearcher request (temperature defaults to 0, the '
        'paper\'s evaluation setting), e.g. \'{"max_tokens": 4096}\'',
        kind=Kind.RESULT,
    )
    setting(g, "--reasoner_prompt", choices=("infer", "train"), default="infer", kind=Kind.RESULT)


def _insight_v_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("Insight-V (--agent insight_v: reasoning agent = --model, summary agent below)")
    setting(
        g,
        "--summary_model",
        help="the summary agent (default: --model, as the release derives both agents from one model)",
        kind=Kind.RESULT,
    )
    setting(
        g, "--summary_api_base_url", help="default: $SUMMARY_API_BASE_URL, then --api_base_url", kind=Kind.OPERATIONAL
    )
    setting(
        g,
        "--summary_api_key",
        help="default: $SUMMARY_API_KEY, then --api_key when the endpoint is the model's",
        kind=Kind.SECRET,
    )


def _analysis_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("analysis (paper Table 6)")
    setting(
        g,
        "--oracle_crops",
        choices=ORACLE_CROPS,
        default=None,
        help="give a single model the crops of each sample's annotated target layouts after the full image "
        "(the '+ target layouts' rows of Table 6; default eval name <model>+target_layouts/<benchmark>)",
        kind=Kind.RESULT,
    )


def _tool_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("tools (--agent opensearch_vl; see README 'OpenSearch-VL')")
    setting(g, "--tool_set", choices=sorted(TOOL_SETS), default="release",
                   help="release: the 8 tools of the released inference schema; all: also visit and python_interpreter", kind=Kind.RESULT)  # fmt: skip
    setting(
        g,
        "--retrieval",
        choices=RETRIEVALS,
        default="local",
        help="local: a corpus index (--corpus; keyless); web: the released Serper + Jina + summariser chain (keys "
        "from SERPER_API_KEY, JINA_API_KEY, QWEN_API_BASE ...); replay: the store of a recorded run "
        "(--retrieval_replay_from), no network. Every answer is recorded in <run>/retrieval/",
        kind=Kind.RESULT,
    )
    # operational, as the other paths below (what the corpus, the replayed store and the model file hold: the card)
    setting(
        g,
        "--corpus",
        default=None,
        help="with --retrieval local: the index made by insight-o3-index-corpus",
        kind=Kind.OPERATIONAL,
    )
    setting(g, "--retrieval_replay_from", default=None, help="with --retrieval replay: a run directory (or its retrieval/ folder)", kind=Kind.OPERATIONAL)  # fmt: skip
    setting(g, "--layout_backend", choices=LAYOUT_BACKENDS, default="tesseract",
                   help="layout_parsing: tesseract (offline, Debian's tesseract-ocr) or api (a PP-StructureV3-compatible endpoint)", kind=Kind.RESULT)  # fmt: skip
    setting(g, "--layout_api_url", default=None, help="with --layout_backend api (default: $LAYOUT_PARSING_API_URL)", kind=Kind.OPERATIONAL)  # fmt: skip
    setting(g, "--sr_model_path", default=None, help="super_resolution's EDSR weights (default: $SR_MODEL_PATH, else EDSR_x4.pb; absent: the image is returned unchanged, as released)", kind=Kind.OPERATIONAL)  # fmt: skip
    setting(
        g, "--tool_seconds", type=float, default=120.0, help="wall-time limit of one tool call", kind=Kind.OPERATIONAL
    )


def build_parser() -> argparse.ArgumentParser:
    p = new_parser("python -m insight_o3.scripts.evaluate", __doc__.split("\n")[0])
    for flags in (
        _data_flags,
        _model_flags,
        _judge_flags,
        _run_flags,
        _insight_o3_flags,
        _insight_v_flags,
        _analysis_flags,
        _tool_flags,
    ):
        flags(p)
    return p


def parse_args(argv: list[str] | None = None) -> EvaluateConfig:
    """The run's :class:`~insight_o3.evaluation.config.EvaluateConfig` from the command line (bad flags: exit 2)."""
    p = build_parser()
    a = p.parse_args(argv)
    _resolve(p, a)
    try:
        return dataclasses.replace(config_of(a, flag_kinds(p)), image_cache=image_cache_settings(p, a))
    except ValueError as e:  # a setting the agents refuse; name the flags
        p.error(str(e))
        raise  # p.error exits


def _resolve(p: argparse.ArgumentParser, a: argparse.Namespace) -> None:
    """Check the flags and fill the defaults that depend on other flags, keys from the environment, and a
    subset's eval name, in place (``p.error`` -> exit 2)."""
    from ..agents.drivers import VREASONER_COMPLETION_KWARGS
    from ..agents.single_model import DEFAULT_COMPLETION_KWARGS
    from ..evaluation.agent_registry import get_agent
    from ..evaluation.judge import default_flow
    from ..evaluation.samples import subset_spec
    from ..tools.setup import ToolSettingsError

    if a.agent is None:
        a.agent = "insight_o3" if a.vsearcher_model else "single_model"
    try:
        plugin = get_agent(a.agent)
    except (UnknownAgent, PluginError) as e:
        p.error(f"--agent: {e}")
    if (a.agent == "insight_o3") != bool(a.vsearcher_model):
        p.error("--vsearcher_model goes with --agent insight_o3 (and --agent insight_o3 needs it)")
    summary_flags = [f"--{n}" for n in ("summary_model", "summary_api_base_url", "summary_api_key") if getattr(a, n)]
    if summary_flags and a.agent != "insight_v":
        p.error(f"{', '.join(summary_flags)}: the summary agent is --agent insight_v's")
    builtin = a.agent in ("single_model", "insight_o3")
    if not builtin and (a.oracle_crops or a.sys_prompt != "model_default"):
        p.error(f"--oracle_crops and --sys_prompt are single-model settings; --agent {a.agent} has its own prompts")
    if a.chat_completion_kwargs is None:  # a plugin's own request settings are its protocol's (under these)
        a.chat_completion_kwargs = (
            dict(VREASONER_COMPLETION_KWARGS)
            if a.vsearcher_model
            else dict(DEFAULT_COMPLETION_KWARGS)
            if builtin
            else {}
        )
    if not plugin.resizes:
        if a.img_max_pixels:
            p.error(f"--img_max_pixels does not apply to --agent {a.agent}: its protocol sends the original image")
        a.img_max_pixels = 0
    if a.img_max_pixels is None:
        a.img_max_pixels = api_image_max_pixels(a.model)
    if a.judge_flow is None:
        a.judge_flow = JudgeFlow.OPENSEARCH_VL if a.agent in TOOL_AGENTS else default_flow(a.vsearcher_model)
    if a.agent in TOOL_AGENTS:
        try:
            tool_settings(a, endpoints=False).check()  # the endpoints are built (once) with the config
        except ToolSettingsError as e:
            p.error(f"--agent {a.agent}: {e} (--retrieval, --corpus, --retrieval_replay_from, --layout_backend)")
    elif a.corpus or a.retrieval_replay_from or a.tool_set != "release":
        p.error(f"--tool_set, --corpus and --retrieval_replay_from are for a tool agent ({', '.join(TOOL_AGENTS)})")
    if "n" in a.chat_completion_kwargs:
        p.error("--chat_completion_kwargs must not set 'n' (use --num_trials)")
    if "n" in a.vsearcher_chat_completion_kwargs:
        p.error("--vsearcher_chat_completion_kwargs must not set 'n' (one vSearcher episode per search)")
    if a.benchmark:
        lay = resolve_layout(a.benchmark, a.data_root)
        a.ann_file = a.ann_file or lay.ann_file
        a.img_dir = a.img_dir or lay.img_dir

    if not a.ann_file or not a.img_dir:
        p.error("give --ann_file and --img_dir, or --benchmark NAME")
    if a.oracle_crops and a.vsearcher_model:
        p.error("--oracle_crops is for a single model (Table 6); InSight-o3 mode finds its own crops")
    if not a.eval_name:
        if not a.benchmark:
            p.error("--eval_name is required unless --benchmark is given")
        suffix = a.oracle_crops or ("" if builtin else a.agent)
        a.eval_name = f"{a.model}{'+' + suffix if suffix else ''}/{a.benchmark}"
        check_output_names(p, eval_name=a.eval_name)  # from --model: 'x/../..' must not leave --output_dir
    _check_ranges(p, a)
    for name in ("sample_ids", "categories"):
        if getattr(a, name):
            setattr(a, name, [x for v in getattr(a, name) for x in v.split(",") if x.strip()])
    a.subset = subset_spec(a.limit, a.sample_ids, a.categories)
    if a.subset:  # never mistaken for a full run: its own directory
        a.eval_name = f"{a.eval_name}@subset-{subset_hash(a.subset)}"
    _endpoint_access(p, a)


def _check_ranges(p: argparse.ArgumentParser, a: argparse.Namespace) -> None:
    """The numeric flags' ranges (``p.error`` -> exit 2)."""
    for name in ("num_trials", "concurrency"):
        if getattr(a, name) < 1:
            p.error(f"--{name} must be at least 1")
    if a.img_max_pixels < 0 or a.max_answer_length < 0 or a.max_retries < 0 or a.image_cache_mb < 0:
        p.error("--img_max_pixels, --max_answer_length, --max_retries and --image_cache_mb must not be negative")
    if a.image_workers is not None and a.image_workers < 0:
        p.error("--image_workers must not be negative")
    if not 0 < a.max_failure_ratio <= 1:
        p.error("--max_failure_ratio must be in (0, 1]")
    if a.limit is not None and a.limit < 1:
        p.error("--limit must be at least 1")
    if a.max_cost is not None and not a.price_file:
        p.error("--max_cost needs --price_file")
    for name in ("rpm", "tpm", "judge_rpm", "judge_tpm", "max_cost", "max_tokens_total"):
        if getattr(a, name) is not None and getattr(a, name) <= 0:
            p.error(f"--{name} must be positive")
    check_run_flags(p, a)  # --max_reply_chars, --max_decode_values (the rest is checked above)


def _endpoint_access(p: argparse.ArgumentParser, a: argparse.Namespace) -> None:
    """Each endpoint's URL and key from its flags or variables, in place (keys in memory only), each stated with its
    source at the start. The judge without a URL of its own is asked on the model's endpoint (said in a warning); the
    judge without a key of its own borrows the model's only on the same host (``--allow_key_to_other_host``)."""
    from ..endpoints.endpoint import (
        ENV_KEYS,
        KeyHostError,
        Sourced,
        borrowed_key,
        describe,
        resolve,
        resolve_key,
        sourced,
    )
    from ..evaluation.agent_registry import get_agent

    model_url = sourced(a.api_base_url, "--api_base_url", ENV_KEYS["main"][1])
    model_key = sourced(a.api_key, "--api_key", ENV_KEYS["main"][0])
    judge_url = sourced(a.judge_api_base_url, "--judge_api_base_url", ("JUDGE_API_BASE_URL", "JUDGE_BASE_URL"))
    on_model = judge_url.value is None and model_url.value is not None  # never the SDK's default in its place
    if on_model:
        judge_url = Sourced(model_url.value, f"the model's endpoint, {model_url.source}")
    judge_own = sourced(a.judge_api_key, "--judge_api_key", ("JUDGE_API_KEY",))
    try:
        judge_key = borrowed_key(
            "judge", judge_url, judge_own, "model", model_url, model_key, a.allow_key_to_other_host
        )
    except KeyHostError as e:
        p.error(str(e))
    vs_url = sourced(a.vsearcher_api_base_url, "--vsearcher_api_base_url", ENV_KEYS["vsearcher"][1])
    vs_key = sourced(a.vsearcher_api_key, "--vsearcher_api_key", ENV_KEYS["vsearcher"][0])
    # registered as secrets (a key given as a flag warned about: the command line is visible to other users)
    a.api_key = resolve_key(a.api_key, ENV_KEYS["main"][0])
    a.api_base_url = model_url.value
    a.judge_api_key = resolve_key(a.judge_api_key, ("JUDGE_API_KEY",), flag="--judge_api_key") or judge_key.value
    a.judge_api_base_url = judge_url.value
    if a.agent == "insight_v":  # the summary agent: the model's endpoint unless told otherwise
        a.summary_model = a.summary_model or a.model
        a.summary_api_key = resolve_key(a.summary_api_key, ENV_KEYS["summary"][0], flag="--summary_api_key")
        a.summary_api_base_url = resolve(a.summary_api_base_url, ENV_KEYS["summary"][1]) or a.api_base_url
        if a.summary_api_key is None and a.summary_api_base_url == a.api_base_url:
            a.summary_api_key = a.api_key  # the model's key, to the model's endpoint only
    a.vsearcher_api_key = resolve_key(a.vsearcher_api_key, ENV_KEYS["vsearcher"][0], flag="--vsearcher_api_key")
    a.vsearcher_api_base_url = vs_url.value
    if get_agent(a.agent).calls_model:
        log.info("endpoints: %s", describe("model", model_url, model_key))
    else:
        log.info("endpoints: model: not asked (--agent %s calls no model)", a.agent)
    if on_model:
        log.warning(
            "%s — no --judge_api_base_url nor $JUDGE_API_BASE_URL, so the judge (%s) is asked on the model's endpoint",
            describe("judge", judge_url, judge_key),
            a.judge_model,
        )
    else:
        log.info("endpoints: %s", describe("judge", judge_url, judge_key))
    if a.vsearcher_model:
        log.info("endpoints: %s", describe("vSearcher", vs_url, vs_key))


TOOL_AGENTS = ("opensearch_vl",)


def tool_settings(a: argparse.Namespace, *, endpoints: bool = True) -> ToolSettings:
    """The tool agent's settings of the flags; with ``--retrieval web`` and ``endpoints``, the released chain's
    endpoints from its variables (said in the log), the Jina key only to Jina's host unless
    ``--allow_key_to_other_host`` (else ``KeyHostError``, a ``ValueError``: exit 2 naming the setting)."""
    from ..tools.setup import ToolSettings
    from ..tools.web import WebSettings

    web = None
    if endpoints and a.retrieval == "web":
        web = WebSettings.from_env(allow_key_to_other_host=a.allow_key_to_other_host)
    return ToolSettings(
        tool_set=a.tool_set,
        retrieval=a.retrieval,
        corpus=a.corpus,
        replay_from=a.retrieval_replay_from,
        layout_backend=a.layout_backend,
        layout_api_url=a.layout_api_url,
        sr_model_path=a.sr_model_path,
        seconds=a.tool_seconds,
        web=web,
    )


def _agent(a: argparse.Namespace) -> AgentSettings:
    """The agent-specific settings of the resolved flags ``a``."""
    from ..agents.config import InSightO3Config, InsightVSettings, ReasonerSettings, SearcherSettings
    from ..endpoints.endpoint import Endpoint
    from ..evaluation.config import PluginAgentSettings, SingleModelSettings
    from ..protocol import prompts

    client = {"timeout": a.client_timeout, "max_retries": a.max_retries}
    if a.agent == "insight_v":
        summary_api = Endpoint(base_url=a.summary_api_base_url, api_key=a.summary_api_key, **client)
        return InsightVSettings(summary_model=a.summary_model, summary_api=summary_api)
    if a.agent in TOOL_AGENTS:
        return PluginAgentSettings(name=a.agent, tools=tool_settings(a))
    if a.agent not in ("single_model", "insight_o3"):
        return PluginAgentSettings(name=a.agent)
    if not a.vsearcher_model:
        return SingleModelSettings(
            system_prompt=prompts.THINK_SYSTEM_PROMPT if a.sys_prompt == "think" else None,
            oracle_crops=a.oracle_crops,
        )
    # --sys_prompt does not apply: the vReasoner's system prompt is the protocol's (--reasoner_prompt)
    return InSightO3Config(
        reasoner=ReasonerSettings(
            model=a.model,
            max_pixels=a.img_max_pixels,
            mode=a.reasoner_prompt,
            max_search_calls=a.max_vsearch_calls,
            completion_kwargs=a.chat_completion_kwargs,
            image_url_extra=a.image_url_extra_settings or None,
        ),
        searcher=SearcherSettings(
            model=a.vsearcher_model,
            max_pixels=a.vsearcher_max_pixels or VSEARCHER_EVAL_MAX_PIXELS,
            prompt=a.vsearcher_prompt,
            max_tool_calls=LIMITS.max_tool_calls,
            completion_kwargs=a.vsearcher_chat_completion_kwargs,
        ),
        reasoner_api=Endpoint(base_url=a.api_base_url, api_key=a.api_key, **client),
        searcher_api=Endpoint(base_url=a.vsearcher_api_base_url, api_key=a.vsearcher_api_key, **client),
    )


def config_of(a: argparse.Namespace, kinds: Mapping[str, Kind]) -> EvaluateConfig:
    """The frozen config of the resolved flags ``a`` (see :func:`_resolve`) of the ``kinds`` their declarations give
    them (``flag_kinds``)."""
    from ..endpoints.endpoint import Endpoint
    from ..evaluation.config import EvaluateConfig, JudgeSettings, RequestRates
    from ..evaluation.runner import RunConfig

    client = {"timeout": a.client_timeout, "max_retries": a.max_retries}
    return EvaluateConfig(
        run=RunConfig(
            output_dir=a.output_dir,
            eval_name=a.eval_name,
            num_trials=a.num_trials,
            retry_failed=a.retry_failed,
            group_trials=not a.separate_trial_requests,
            max_reply_chars=a.max_reply_chars,
            controls=run_controls(a),
        ),
        ann_file=a.ann_file,
        img_dir=a.img_dir,
        allow_outside_img_dir=a.allow_outside_img_dir,
        subset=a.subset,
        model=a.model,
        api=Endpoint(base_url=a.api_base_url, api_key=a.api_key, **client),
        img_max_pixels=a.img_max_pixels,
        completion_kwargs=a.chat_completion_kwargs,
        image_url_extra=a.image_url_extra_settings,
        separate_trial_requests=a.separate_trial_requests,
        judge=JudgeSettings(
            model=a.judge_model,
            api=Endpoint(base_url=a.judge_api_base_url, api_key=a.judge_api_key, **client),
            max_answer_length=a.max_answer_length,
            flow=a.judge_flow,
            cache=a.judge_cache,
            retries=a.judge_retries,
        ),
        agent=_agent(a),
        adaptive_concurrency=not a.no_adaptive_concurrency,
        model_rates=RequestRates(rpm=a.rpm, tpm=a.tpm),
        judge_rates=RequestRates(rpm=a.judge_rpm, tpm=a.judge_tpm),
        max_decode_values=a.max_decode_values,
        image_cache_mb=a.image_cache_mb,
        settings=args_record(a),
        kinds={**kinds, **RECORDED_KINDS},
    )


def subset_hash(spec: dict) -> str:
    import hashlib

    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:8]


def run_card(c: EvaluateConfig, num_samples: int) -> JSONObject:
    """The run's ``run_card.json`` (every effective setting, never a key)."""
    from ..evaluation.agent_registry import get_agent
    from ..evaluation.config import PluginAgentSettings
    from ..evaluation.run_card import build_run_card
    from ..tools.setup import tools_card

    image_budget: dict[str, int | None] = {"model": c.img_max_pixels or None}
    seeds = {"model": c.completion_kwargs["seed"]} if "seed" in c.completion_kwargs else {}
    if c.insight_o3:
        image_budget["vsearcher"] = c.insight_o3.searcher.max_pixels
        if "seed" in c.insight_o3.searcher.completion_kwargs:
            seeds["vsearcher"] = c.insight_o3.searcher.completion_kwargs["seed"]
    return build_run_card(
        dict(c.settings),
        ann_file=c.ann_file,
        subset=c.subset,
        num_samples=num_samples,
        image_budget=image_budget,
        judge={
            "model": c.judge.model,
            "flow": c.judge.flow,
            "max_answer_length": c.judge.max_answer_length,
            "cache": c.judge.cache,
        },
        seeds=seeds,
        extra={
            "agent": {"name": c.agent_name, "protocol": get_agent(c.agent_name).protocol_version},
            **(
                {"tools": tools_card(c.agent.tools)}
                if isinstance(c.agent, PluginAgentSettings) and c.agent.tools
                else {}
            ),
        },
    )


def cost_model(c: EvaluateConfig) -> CostModel | None:
    from ..endpoints.usage import CostModel

    vsearcher = c.insight_o3.searcher.model if c.insight_o3 else None
    summary = c.insight_v.summary_model if c.insight_v else None
    models = {"model": c.model, "judge": c.judge.model, "vsearcher": vsearcher, "summary": summary}
    return CostModel.from_file(c.run.controls.price_file, models)


#: The settings :func:`args_record` holds besides the flags: the resolved ``--limit``/``--sample_ids``/``--categories``
#: (``subset``: a result, its directory name carries its hash) and the directory the command ran in (a path).
RECORDED_KINDS = {"subset": Kind.RESULT, "working_dir": Kind.OPERATIONAL}


def args_record(a: argparse.Namespace) -> JSONObject:
    """What args.json holds: every setting except the keys, and the directory the command ran in (relative
    --ann_file/--img_dir and the records' image paths are relative to it; the viewers join them)."""
    return {**{k: v for k, v in vars(a).items() if k not in SECRET_ARGS}, "working_dir": os.getcwd()}


def image_store(c: EvaluateConfig, originals_cached: int) -> ImageStore:
    """The run's image store: ``--image_workers`` processes (default: one per usable CPU), encoding as the
    agent does. InSight-o3 mode composites RGBA images on white as the fork does (``images.ALPHA_MODES``);
    single-model runs drop the alpha channel as the released harness does."""
    from ..evaluation.agent_registry import get_agent
    from ..imaging.images import ImageStore

    plugin = get_agent(c.agent_name)
    return ImageStore.for_image_workers(
        c.run.controls.image_workers,
        max_cached_bytes=c.image_cache_mb * 2**20,
        originals_cached=originals_cached,
        max_decode_values=c.max_decode_values,
        alpha=plugin.alpha,
        fmt=plugin.image_format,
        image_cache=c.image_cache,
    )


@dataclass(frozen=True)
class Limiters:
    """One :class:`AdaptiveLimiter` per endpoint (None: requests go straight to the SDK)."""

    model: AdaptiveLimiter | None
    judge: AdaptiveLimiter | None
    vsearcher: AdaptiveLimiter | None

    @classmethod
    def of(cls, c: EvaluateConfig) -> Limiters:
        from ..endpoints.rate_limit import AdaptiveLimiter

        adaptive, m, j, n = c.adaptive_concurrency, c.model_rates, c.judge_rates, c.run.controls.concurrency
        return cls(
            AdaptiveLimiter(n, m.rpm, m.tpm) if adaptive or m.rpm or m.tpm else None,
            AdaptiveLimiter(n, j.rpm, j.tpm) if adaptive or j.rpm or j.tpm else None,
            AdaptiveLimiter(n) if adaptive and c.insight_o3 else None,
        )


def _solver(c: EvaluateConfig, client: AsyncOpenAI, images: ImageStore, guard: RunGuard, limiters: Limiters) -> Solver:
    """The solver of the run's agent (:mod:`insight_o3.evaluation.agent_registry`)."""
    from ..evaluation.agent_registry import AgentContext, build_solver

    ctx = AgentContext(
        config=c,
        client=client,
        images=images,
        guard=guard,
        model_limiter=limiters.model,
        vsearcher_limiter=limiters.vsearcher,
    )
    return build_solver(c.agent_name, ctx)


def endpoints(c: EvaluateConfig) -> list[Called]:
    """The endpoints the run calls (each checked before the first sample unless ``--skip_endpoint_check``)."""
    from ..evaluation.agent_registry import get_agent

    eps: list[Called] = [("judge", c.judge.api)]
    if get_agent(c.agent_name).calls_model:  # a plugin that answers without a model has no model endpoint to check
        eps.insert(0, ("model", c.api))
    if c.insight_o3:
        eps.append(("vSearcher", c.insight_o3.searcher_api))
    if c.insight_v and (c.insight_v.summary_api.base_url, c.insight_v.summary_api.api_key) != (
        c.api.base_url,
        c.api.api_key,
    ):
        eps.append(("summary", c.insight_v.summary_api))
    return eps


def _image_cache_entry(images: ImageStore) -> JSONObject:
    """The run's history entry field of the prepared-image cache: what it did this run (none without one)."""
    stats = images.prepared_stats()
    return {} if stats is None else {"image_cache": stats}


def _log_stats(images: ImageStore, limiters: Limiters) -> None:
    log.info("images decoded %(decoded)d, encoded %(encoded)d, cache hits %(cache_hits)d", images.stats)
    prepared = images.prepared_stats()
    if prepared is not None:
        log.info(
            "prepared-image cache %(dir)s: %(hits)d hits, %(misses)d misses, %(bytes_read)d bytes read, "
            "%(bytes_written)d written",
            prepared,
        )
    if limiters.model is not None and limiters.model.throttled:
        log.info(
            "model endpoint: %(throttled)d 429 responses, concurrency cut %(cuts)d times "
            "(lowest %(lowest_limit)d, now %(limit)d)",
            limiters.model.stats(),
        )


async def _run(c: EvaluateConfig, samples: list[Sample], costs: CostModel | None = None) -> JSONObject:
    from ..endpoints.client import make_client
    from ..endpoints.guard import RunGuard
    from ..evaluation.agent_registry import get_agent
    from ..evaluation.judge import AnswerJudge, JudgeCache
    from ..evaluation.run_card import card_invocation
    from ..evaluation.runner import run_evaluation

    guard = RunGuard(c.run.controls.max_failure_ratio)
    # decoded originals are only needed again for crops (InSight-o3 mode); single-model runs keep none
    oracle = c.single_model is not None and c.single_model.oracle_crops
    keeps = get_agent(c.agent_name).keeps_originals
    images = image_store(c, originals_cached=2 if keeps or oracle else 0)
    limiters = Limiters.of(c)
    conns, cap = max(c.run.controls.concurrency * 2, 16), c.reply_chars  # each client's body cap derives from cap
    choices = c.run.num_trials if c.single_model is not None and not c.separate_trial_requests else 1  # the request's n
    main_client = make_client(
        c.api,
        role="model",
        max_connections=conns,
        guard=guard,
        limiter=limiters.model,
        max_reply_chars=cap,
        choices=choices,
    )
    judge_client = make_client(
        c.judge.api, role="judge", max_connections=conns, guard=guard, limiter=limiters.judge, max_reply_chars=cap
    )
    solver: Solver | None = None
    try:
        solver = _solver(c, main_client, images, guard, limiters)
        judge = AnswerJudge(
            judge_client,
            c.judge.model,
            c.judge.max_answer_length,
            flow=c.judge.flow,
            cache=JudgeCache() if c.judge.cache else None,
            retries=c.judge.retries,
        )
        card = run_card(c, len(samples))
        try:
            return await run_evaluation(
                samples,
                solver,
                judge,
                c.run,
                dict(c.settings),
                guard=guard,
                run_card=card,
                invocation=card_invocation("evaluate", dict(c.settings), c.kinds, card),
                endpoints=endpoints(c),
                costs=costs,
                entry_fields=functools.partial(_image_cache_entry, images),
            )
        finally:
            _log_stats(images, limiters)
            if judge.rejudged:
                log.info("judge: %d attempt(s) judged again after an ambiguous or malformed reply", judge.rejudged)
    finally:
        if solver is not None:
            await solver.aclose()
        await main_client.close()
        await judge_client.close()
        images.close()


def _missing_annotation(c: EvaluateConfig) -> str:
    """What to say when the annotation file is not there: where ``--benchmark`` looked and how to fill the data root,
    or, for a file given as ``--ann_file``, just that."""
    where = os.path.abspath(c.ann_file)
    bench = c.settings.get("benchmark")
    if (
        isinstance(bench, str)
        and c.ann_file == resolve_layout(bench, _str_or_none(c.settings.get("data_root"))).ann_file
    ):
        return (
            f"{where}: annotation file of --benchmark {bench} not found; --benchmark looks under the data root "
            f"(--data_root, else ${DATA_ROOT_ENV}, else ./data); python -m insight_o3.scripts.download_benchmarks "
            f"{bench} fetches it (data/README.md)"
        )
    return f"--ann_file {c.ann_file}: annotation file not found ({where})"


def _str_or_none(value: object) -> str | None:
    return value if isinstance(value, str) else None


@entry_point
def main(argv: list[str] | None = None) -> int:
    setup_logging()
    a = parse_args(argv)  # --help exits here, before the run's modules are imported
    from ..agents.oracle import check_oracle_samples
    from ..base.redaction import redact
    from ..endpoints.usage import PriceError
    from ..evaluation.run_dir import RunDirError
    from ..evaluation.runner import failed_count
    from ..evaluation.samples import load_samples, select_subset
    from ..jobs.integrity import SettingsChanged
    from ..protocol.sample import AnnotationError
    from ..storage.atomic import UnusableOutputDir
    from ..storage.record_log import RecordFileError

    if not os.path.isfile(a.ann_file):
        print(f"error: {_missing_annotation(a)}", file=sys.stderr)
        return ExitCode.BAD_INPUT
    try:
        samples = select_subset(
            load_samples(a.ann_file, a.img_dir, allow_outside=a.allow_outside_img_dir), a.subset, a.ann_file
        )
        if a.single_model and a.single_model.oracle_crops:
            check_oracle_samples(samples, a.ann_file)
        costs = cost_model(a)
    except (AnnotationError, PriceError) as e:
        bench = a.settings.get("benchmark")
        hint = (
            f" (the images of --benchmark {bench}: python -m insight_o3.scripts.download_benchmarks {bench})"
            if isinstance(e, AnnotationError) and bench and "not found" in str(e)
            else ""
        )
        print(f"error: {redact(str(e))}{hint}", file=sys.stderr)
        return ExitCode.BAD_INPUT
    log.info(
        "%d samples from %s%s; results in %s", len(samples), a.ann_file, " (subset)" if a.subset else "", a.run.eval_dir
    )
    try:
        summary = asyncio.run(_run(a, samples, costs))
    except (RecordFileError, RunDirError, SettingsChanged, UnusableOutputDir, PluginError) as e:
        print(f"error: {redact(str(e))}", file=sys.stderr)
        return ExitCode.BAD_INPUT
    except stop_errors() as e:
        return report_stop(e, results=a.run.eval_dir)
    acc = summary.get("overall_accuracy", {})
    print(
        f"{a.run.eval_name}: accuracy {acc.get('mean', 0):.4f} ± {acc.get('std', 0):.4f} "
        f"over {summary['num_trials']} trial(s); critical failures "
        f"{summary.get('critical_failure_ratio', {}).get('mean', 0):.4f}"
    )
    totals = summary.get("run_totals") or {}
    cost = totals.get("cost_usd")
    print(f"tokens {totals.get('tokens_total', 0)}" + (f", cost ${cost:.4f}" if cost is not None else ""))
    failed = failed_count(summary)
    if failed:
        print(
            f"{failed} sample-trial(s) failed (status 'failed': API errors or unusable images, see their "
            f"fail_reason; counted as critical failures); rerun with --retry_failed to retry only those",
            file=sys.stderr,
        )
        return ExitCode.INCOMPLETE
    return ExitCode.OK


if __name__ == "__main__":
    sys.exit(main())
