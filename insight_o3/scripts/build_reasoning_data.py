"""Build Insight-V-style reasoning data: progressive chains, the two-tier assessment, SFT sets and DPO pairs.

    build-reasoning-data generate --output_dir W --ann_file train.jsonl --img_dir images/ --model MODEL \\
                                  --api_base_url URL [--num_chains 4]
    build-reasoning-data check    --output_dir W --judge_model LLM [--judge_api_base_url URL]
    build-reasoning-data score    --output_dir W --scorer_model MLLM [--scorer_api_base_url URL]
    build-reasoning-data export   --output_dir W [--min_score 60 --flawed_ratio 0.3 --pairs_per_question 1]

No models at hand? ``python -m insight_o3.scripts.build_reasoning_data_demo`` runs every step offline against
scripted models (data/README.md).

(``python -m insight_o3.scripts.build_reasoning_data ...`` or the console script ``insight-o3-build-reasoning-data``;
the same steps as functions: :mod:`insight_o3.reasoning_data`.) Every step reads and writes one work directory
(``--output_dir``; layout in :mod:`insight_o3.reasoning_data.workspace`) and holds its lock while it runs. The
model-calling steps (``generate``, ``check``, ``score``) append one record per chain as it finishes and resume where
they stopped; token usage and cost (``--price_file``) per record, budgets (``--max_cost``, ``--max_tokens_total``);
each writes ``<step>/step_card.json``, and a rerun with other result-changing settings is refused (status 2).

Exit status: 0 done; 1 some chains failed (rerun to retry them); 2 bad input (flags, the annotation file, a missing
step output; the message names the file and what to run first) or changed settings; 3 an output could not be
written; 4 stopped early (a 401/403/404, too many failed requests, a budget, a signal); 5 another step holds the
work directory.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from ..base.json_types import JSONObject
from ..base.setting_kinds import Kind, field_kinds
from ..base.untrusted import loads
from ..endpoints.endpoint import ENV_KEYS, KeyHostError
from ..endpoints.usage import PriceError
from ..protocol.sample import AnnotationError
from ..reasoning_data.settings import (
    CheckSettings,
    ExportSettings,
    GenerateSettings,
    ModelAccess,
    ScoreSettings,
)
from ..reasoning_data.workspace import EngineInputError
from ._shared import (
    ExitCode,
    add_allow_outside_flag,
    add_budget_flags,
    add_client_flags,
    add_judge_flags,
    add_key_host_flag,
    add_output_dir,
    add_run_flags,
    check_run_flags,
    endpoint_of,
    entry_point,
    new_parser,
    run_controls,
    run_main,
    setting,
    setup_logging,
)

PROG = "python -m insight_o3.scripts.build_reasoning_data"
BAD_INPUT = (AnnotationError, EngineInputError, PriceError, KeyHostError)


def _json_object(text: str) -> JSONObject:
    try:
        v = loads(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"not JSON: {e}") from None
    if not isinstance(v, dict):
        raise argparse.ArgumentTypeError("must be a JSON object")
    return v


def _common(p: argparse.ArgumentParser, *, concurrency: int, images: bool) -> None:
    add_output_dir(p, required=True, help="the work directory (every step reads and writes here)")
    add_client_flags(p, max_retries=5)
    add_run_flags(p, concurrency=concurrency, image_workers=images)
    add_budget_flags(p, what="chains")
    setting(
        p,
        "--chat_completion_kwargs",
        type=_json_object,
        default={},
        help="request settings over the step's own (e.g. '{\"max_tokens\": 2048}')",
        kind=Kind.RESULT,
    )


def _generate_flags(p: argparse.ArgumentParser) -> None:
    setting(
        p,
        "--ann_file",
        required=True,
        help="the questions: annotation JSONL (question, options, answer, image)",
        kind=Kind.OPERATIONAL,
    )
    setting(
        p,
        "--img_dir",
        required=True,
        help="directory the annotation's image paths are relative to",
        kind=Kind.OPERATIONAL,
    )
    add_allow_outside_flag(p)
    setting(
        p,
        "--model",
        required=True,
        help="the generator (the release: Qwen2-VL; a round of DPO: the reasoner)",
        kind=Kind.RESULT,
    )
    keys, urls = ENV_KEYS["main"]
    setting(p, "--api_base_url", help="default: " + ", then ".join(f"${n}" for n in urls), kind=Kind.OPERATIONAL)
    setting(p, "--api_key", help="default: " + ", then ".join(f"${n}" for n in keys), kind=Kind.SECRET)
    setting(
        p, "--num_chains", type=int, default=4, help="chains per question (the paper's N; default 4)", kind=Kind.RESULT
    )
    setting(
        p,
        "--chain_retries",
        type=int,
        default=1,
        help="a malformed chain is generated again this many times (default 1)",
        kind=Kind.RESULT,
    )
    setting(
        p, "--seed", type=int, default=0, help="seeds every chain's requests (with the chain's key)", kind=Kind.RESULT
    )
    _common(p, concurrency=16, images=True)


def _check_flags(p: argparse.ArgumentParser) -> None:
    jkeys, jurls = ENV_KEYS["judge"]
    add_judge_flags(
        p,
        model_help="the LLM (the release: a Qwen2 LLM served by vLLM)",
        url_help="default: " + ", then ".join(f"${n}" for n in jurls),
        key_help="default: $JUDGE_API_KEY, then $OPENAI_API_KEY where $OPENAI_BASE_URL's host is the judge's",
    )
    add_key_host_flag(p)
    _common(p, concurrency=32, images=False)


def _score_flags(p: argparse.ArgumentParser) -> None:
    setting(p, "--scorer_model", required=True, help="the MLLM (the seed text: e.g. Qwen2-VL)", kind=Kind.RESULT)
    setting(p, "--scorer_api_base_url", help="default: $OPENAI_BASE_URL", kind=Kind.OPERATIONAL)
    setting(p, "--scorer_api_key", help="default: $OPENAI_API_KEY", kind=Kind.SECRET)
    setting(
        p,
        "--parse_retries",
        type=int,
        default=2,
        help="ask again this many times for a reply without a score (default 2)",
        kind=Kind.OPERATIONAL,
    )
    _common(p, concurrency=16, images=True)


def _export_flags(p: argparse.ArgumentParser) -> None:
    """One flag per :class:`ExportSettings` field, of the kind the field declares."""
    add_output_dir(p, required=True, help="the work directory")
    d, kinds = ExportSettings(), field_kinds(ExportSettings)
    setting(
        p,
        "--min_score",
        type=int,
        default=d.min_score,
        help=f"a kept chain's least score (default {d.min_score})",
        kind=kinds["min_score"],
    )
    setting(
        p,
        "--keep_top",
        type=int,
        default=d.keep_top,
        help="best kept chains per question in the reasoning set",
        kind=kinds["keep_top"],
    )
    setting(
        p,
        "--flawed_ratio",
        type=float,
        default=d.flawed_ratio,
        help=f"share of flawed chains in the summary-agent set (default {d.flawed_ratio})",
        kind=kinds["flawed_ratio"],
    )
    setting(
        p,
        "--pairs_per_question",
        type=int,
        default=d.pairs_per_question,
        help="DPO pairs per question",
        kind=kinds["pairs_per_question"],
    )
    setting(
        p,
        "--dpo_min_margin",
        type=int,
        default=d.dpo_min_margin,
        help="a low-scored rejected chain is this many points below the chosen one at least",
        kind=kinds["dpo_min_margin"],
    )
    setting(
        p, "--seed", type=int, default=d.seed, help="picks the flawed chains of the summary set", kind=kinds["seed"]
    )


def build_parser() -> argparse.ArgumentParser:
    ap = new_parser(PROG, __doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="step", required=True, metavar="STEP")
    steps = {
        "generate": ("N progressive reasoning chains per question (a VLM)", _generate_flags),
        "check": ("tier 1: an LLM checks each chain's final answer against the ground truth", _check_flags),
        "score": ("tier 2: an MLLM scores each chain that passed, 1-100", _score_flags),
        "export": ("the reasoning- and summary-agent SFT sets, DPO pairs, the ranking", _export_flags),
    }
    for name, (help, flags) in steps.items():
        p = sub.add_parser(name, help=help)
        p.formatter_class = ap.formatter_class
        flags(p)
    return ap


def _print(summary: object) -> None:
    print(json.dumps(summary, ensure_ascii=False))


def step_settings(a: argparse.Namespace) -> GenerateSettings | CheckSettings | ScoreSettings | ExportSettings:
    """The step's settings of the flags (``ValueError`` naming the field of a bad value)."""
    if a.step == "generate":
        return GenerateSettings(
            num_chains=a.num_chains,
            chain_retries=a.chain_retries,
            completion_kwargs=a.chat_completion_kwargs,
            seed=a.seed,
        )
    if a.step == "check":
        return CheckSettings(completion_kwargs=a.chat_completion_kwargs)
    if a.step == "score":
        return ScoreSettings(parse_retries=a.parse_retries, completion_kwargs=a.chat_completion_kwargs)
    return ExportSettings(
        min_score=a.min_score,
        keep_top=a.keep_top,
        flawed_ratio=a.flawed_ratio,
        pairs_per_question=a.pairs_per_question,
        dpo_min_margin=a.dpo_min_margin,
        seed=a.seed,
    )


def run_generate(a: argparse.Namespace, settings: GenerateSettings) -> int:
    from ..reasoning_data import engine  # the clients (openai), Pillow: on the step's path only

    ep = ModelAccess(model=a.model, api=endpoint_of(a, role=f"generator {a.model}"))
    result = engine.generate(
        a.output_dir,
        a.ann_file,
        a.img_dir,
        ep,
        settings,
        run_controls(a),
        allow_outside_img_dir=a.allow_outside_img_dir,
    )
    _print(result.summary)
    return result.exit_code


def run_check(a: argparse.Namespace, settings: CheckSettings) -> int:
    from ..reasoning_data import engine

    ep = ModelAccess(model=a.judge_model, api=endpoint_of(a, "judge", prefix="judge_", role=f"judge {a.judge_model}"))
    result = engine.check(a.output_dir, ep, settings, run_controls(a))
    _print(result.summary)
    return result.exit_code


def run_score(a: argparse.Namespace, settings: ScoreSettings) -> int:
    from ..reasoning_data import engine

    ep = ModelAccess(
        model=a.scorer_model, api=endpoint_of(a, "main", prefix="scorer_", role=f"scorer {a.scorer_model}")
    )
    result = engine.score(a.output_dir, ep, settings, run_controls(a))
    _print(result.summary)
    return result.exit_code


def run_export(a: argparse.Namespace, settings: ExportSettings) -> int:
    from ..reasoning_data import engine

    out = engine.export(a.output_dir, settings)
    _print({"step": "export", **out.counts, "files": out.files})
    return ExitCode.OK


@entry_point
def main(argv: list[str] | None = None) -> int:
    setup_logging()
    ap = build_parser()
    a = ap.parse_args(sys.argv[1:] if argv is None else argv)
    check_run_flags(ap, a)
    if getattr(a, "max_cost", None) is not None and not a.price_file:
        ap.error("--max_cost needs --price_file")
    try:
        settings = step_settings(a)
    except ValueError as e:
        ap.error(str(e))
    steps: dict[str, Any] = {"generate": run_generate, "check": run_check, "score": run_score, "export": run_export}
    results = os.path.join(a.output_dir, a.step)
    return run_main(lambda: steps[a.step](a, settings), bad_input=BAD_INPUT, results=results)


if __name__ == "__main__":
    sys.exit(main())
