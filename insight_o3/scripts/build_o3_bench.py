"""Build an O3-Bench-style benchmark: the paper's construction pipeline (§3.2, B.2, E.1, E.2) as subcommands.

    build-o3-bench sources    --output_dir W --chart_images D --chart_layouts L [--map_images D --map_layouts L]
                              [--category floor_plan,D,L ...]
    build-o3-bench extract    --output_dir W --model Qwen/Qwen2.5-VL-32B-Instruct --api_base_url URL
    build-o3-bench synthesize --output_dir W --model gpt-5 [--synth_prompt floor_plan=FILE ...]
    build-o3-bench validate   --output_dir W [--validation_config rules.json]
    build-o3-bench filter     --output_dir W --solver gpt-5-mini --solver gemini-2.5-flash,URL,KEY_ENV ...
    build-o3-bench review page  --output_dir W        (then fill in W/review/batch_*.decisions.txt)
    build-o3-bench review apply --output_dir W
    build-o3-bench release    --output_dir W --seed 0

No models at hand? ``python -m insight_o3.scripts.build_o3_bench_demo`` runs every step offline on generated charts
and maps against scripted models (data/README.md).

(``python -m insight_o3.scripts.build_o3_bench ...`` or the console script ``insight-o3-build-o3-bench``.) Every
step reads and writes one workspace directory (``--output_dir``; layout in
:mod:`insight_o3.o3bench.workspace`) and holds its lock while it runs. The model-calling steps (``extract``,
``synthesize``, ``filter``) append one record per item as it finishes and resume where they stopped; each has
``--limit`` for a dry look, token usage and cost (``--price_file``) per record, budgets (``--max_cost``,
``--max_tokens_total``), adaptive concurrency with ``--rpm`` / ``--tpm``, and writes ``<step>/step_card.json``.

Exit status (:class:`insight_o3.base.exit_codes.ExitCode`): 0 done; 1 some items failed (rerun to retry them) or
wait for an earlier step (``synthesize``: images whose extraction is not complete; the message names the command to
run first); 2 bad input (flags, a layout file, a workspace file, a decisions file; the message names the file and
line) or nothing to do because the earlier step has not produced this step's input (the message names the command to
run first); 3 an output could not be written; 4 stopped early (a 401/403/404, too many failed requests, a budget);
5 another step holds the workspace.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
from typing import TYPE_CHECKING, Any

from ..base.json_types import JSONObject
from ..base.setting_kinds import Kind
from ..base.untrusted import loads
from ..data.layout import LayoutError
from ..endpoints.endpoint import (
    ENV_KEYS,
    Endpoint,
    KeyHostError,
    Sourced,
    borrowed_key,
    describe,
    resolve,
    resolve_key,
    sourced,
)
from ..endpoints.usage import CostModel, PriceError
from ..imaging.geometry import VSEARCHER_EVAL_MAX_PIXELS
from ..o3bench import sources as src_mod
from ..o3bench.prompts import (
    EXTRACTION_PROMPT,
    LAYOUT_TEXT_MODES,
    SYNTHESIS_PROMPTS,
    check_category,
    extraction_prompt_file,
    sha256_text,
    synthesis_prompt_name,
    synthesis_templates,
)
from ..o3bench.records import BuildFileError, read_items, read_sources
from ..o3bench.validation_rules import load_rules
from ..o3bench.workspace import PROG, Workspace
from ..storage.atomic import write_jsonl_atomic, write_text_atomic
from ..storage.lock import run_lock
from ._shared import (
    ExitCode,
    add_api_flags,
    add_budget_flags,
    add_client_flags,
    add_image_budget_flag,
    add_judge_flags,
    add_key_host_flag,
    add_output_dir,
    add_run_flags,
    add_separate_requests_flag,
    check_run_flags,
    endpoint_of,
    entry_point,
    invocation_of,
    new_parser,
    non_empty,
    run_controls,
    run_main,
    setting,
    setup_logging,
)

if TYPE_CHECKING:
    from ..o3bench.steps import StepSettings

log = logging.getLogger("insight_o3.build_o3_bench")


# ----------------------------------------------------------------------------- flags
def _json_object(text: str) -> JSONObject:
    try:
        v = loads(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"not JSON: {e}") from None
    if not isinstance(v, dict):
        raise argparse.ArgumentTypeError("must be a JSON object")
    return v


def _workspace(p: argparse.ArgumentParser) -> None:
    add_output_dir(p, required=True, help="the build's workspace directory (every step reads and writes here)")


def _step_flags(
    p: argparse.ArgumentParser, *, concurrency: int, parse_retries: bool = True, images: bool = False
) -> None:
    """The shared flags of a model-calling step."""
    add_client_flags(p, max_retries=5)
    add_run_flags(p, concurrency=concurrency, image_workers=images)
    g = p.add_argument_group("rate limits, budget, resume")
    setting(g, "--rpm", type=float, default=None, help="requests per minute to each endpoint", kind=Kind.OPERATIONAL)
    setting(g, "--tpm", type=float, default=None, help="tokens per minute to each endpoint", kind=Kind.OPERATIONAL)
    setting(
        g,
        "--no_adaptive_concurrency",
        action="store_true",
        help="leave 429s to the SDK's retries (no adaptive limit)",
        kind=Kind.OPERATIONAL,
    )
    add_budget_flags(g, what="items")  # counted over the step's records, earlier runs included
    setting(
        g,
        "--limit",
        type=int,
        default=None,
        help="only the first N items (extract, synthesize: images; filter: candidates) for a dry look; a later run "
        "without it goes on from there",
        kind=Kind.OPERATIONAL,
    )
    setting(
        g,
        "--no_retry_failed",
        action="store_true",
        help="keep failed records of earlier runs as they are",
        kind=Kind.OPERATIONAL,
    )
    setting(
        g,
        "--chat_completion_kwargs",
        type=_json_object,
        default={},
        help='request settings for every request, e.g. \'{"temperature": 0, "max_tokens": 8192}\'',
        kind=Kind.RESULT,
    )
    if parse_retries:
        setting(
            g,
            "--parse_retries",
            type=int,
            default=2,
            help="ask again this many times when a reply lacks the required format (default 2)",
            kind=Kind.OPERATIONAL,
        )


def _sources_flags(sub: Any, formatter: Any) -> None:
    """The ``sources`` subcommand and its flags."""
    p = sub.add_parser(
        "sources", help="candidate images + layout boxes (PaddleX layout JSON)", description=src_mod.__doc__
    )
    p.formatter_class = formatter
    _workspace(p)
    for subset in ("chart", "map"):
        p.add_argument(f"--{subset}_images", default=None, help=f"directory of {subset} images")
        p.add_argument(
            f"--{subset}_layouts",
            default=None,
            help=f"the detector's JSON for the {subset} images: a directory of *_res.json, a .json or a .jsonl "
            f"(with --detect: where to write them; default <output_dir>/layouts/{subset})",
        )
    p.add_argument(
        "--category",
        action="append",
        default=None,
        metavar="NAME,IMAGE_DIR,LAYOUTS[,MIN_LAYOUTS]",
        help="a category of one's own (repeat): its name (lower-case letters, digits, _), its images, the "
        "detector's JSON for them (with --detect: where to write it) and the fewest layouts an image needs "
        "(default 2); its E.2 prompt is 'synthesize --synth_prompt NAME=FILE' (see data/README.md)",
    )
    p.add_argument("--min_layouts", type=int, default=8, help="keep chart images with at least N layouts (paper: 8)")
    p.add_argument("--min_map_layouts", type=int, default=2, help="keep map images with at least N layouts")
    setting(p, "--min_score", type=float, default=0.0, help="ignore detections scored below this", kind=Kind.RESULT)
    p.add_argument("--detect", action="store_true", help="run PaddleOCR's layout detector first (the 'layout' extra)")
    p.add_argument("--detector_model", default=src_mod.DETECTOR_MODEL)
    p.add_argument("--detector_threshold", type=float, default=None, help="the detector's score threshold")


def _extract_flags(sub: Any, formatter: Any) -> None:
    """The ``extract`` subcommand and its flags."""
    p = sub.add_parser(
        "extract",
        help="E.1 information extraction (a VLM)",
        description="E.1 information extraction: a VLM describes each source image and each of its layout crops "
        "(one record per image or crop in <output_dir>/extract/records.jsonl; resumes where it stopped).",
    )
    p.formatter_class = formatter
    _workspace(p)
    setting(p, "--model", type=non_empty, required=True, help="the VLM (paper: Qwen2.5-VL-32B)", kind=Kind.RESULT)
    add_api_flags(p, env="main")
    add_image_budget_flag(
        p,
        default=VSEARCHER_EVAL_MAX_PIXELS,
        help="images and crops are sent on Qwen2.5-VL's smart_resize grid under this budget (default 16384*28*28)",
    )
    setting(p, "--extract_prompt_role", choices=("system", "user"), default="system", kind=Kind.RESULT)
    # operational: a path; the prompt's content is fixed through the derived prompts_sha256
    setting(
        p,
        "--extract_prompt",
        default=None,
        metavar="FILE",
        help="an E.1 prompt of one's own (UTF-8, sent exactly as the file holds it; it must ask for the sections "
        "Image Identification, Detailed Caption, Extracted OCR); default: the paper's E.1. Recorded in the step card "
        "with its sha256; a later run into the same workspace with other content is refused",
        kind=Kind.OPERATIONAL,
    )
    _step_flags(p, concurrency=16, images=True)


def _synthesize_flags(sub: Any, formatter: Any) -> None:
    """The ``synthesize`` subcommand and its flags."""
    p = sub.add_parser(
        "synthesize",
        help="E.2 question synthesis (a text-only model)",
        description="E.2 question synthesis: a text-only model writes multiple-choice questions from the E.1 "
        "descriptions of an image and its layouts (one record per image in <output_dir>/synthesize/records.jsonl; "
        "images whose extraction is not complete wait; resumes where it stopped).",
    )
    p.formatter_class = formatter
    _workspace(p)
    setting(p, "--model", type=non_empty, required=True, help="the text-only model (paper: GPT-5)", kind=Kind.RESULT)
    add_api_flags(p, env="main")
    setting(
        p,
        "--layout_text",
        choices=LAYOUT_TEXT_MODES,
        default="both",
        help="what caption_or_ocr holds",
        kind=Kind.RESULT,
    )
    # operational: a path; the prompt's content is fixed through the derived prompts_sha256
    setting(
        p,
        "--synth_prompt",
        action="append",
        default=None,
        metavar="CATEGORY=FILE",
        help="the E.2 prompt of a category (repeat): a str.format template with {GLOBAL_OCR}, {GLOBAL_CAPTION}, "
        "{LAYOUTS} (literal braces doubled); replaces the shipped one of chart or map, or adds a category of one's "
        "own. Recorded in the step card with its sha256; a later run with other content is refused",
        kind=Kind.OPERATIONAL,
    )
    _step_flags(p, concurrency=8)


def _validate_flags(sub: Any, formatter: Any) -> None:
    """The ``validate`` subcommand and its flags."""
    p = sub.add_parser("validate", help="deterministic checks; F share")
    p.formatter_class = formatter
    _workspace(p)
    p.add_argument(
        "--validation_config",
        default=None,
        metavar="RULES.json|RULES.toml",
        help="the rules as configuration: forbidden_words, allowed_phrases, allow_image_labels, option_label_forms, "
        "min_cited_layouts, f_share_limit (each optional; default: the paper's E.2 checks; see data/README.md); "
        "recorded with its sha256 in validate/rules.json and the release's run card",
    )


def _filter_flags(sub: Any, formatter: Any) -> None:
    """The ``filter`` subcommand and its flags."""
    p = sub.add_parser("filter", help="difficulty filter with several models (evaluate's request and judge)")
    p.formatter_class = formatter
    _workspace(p)
    setting(
        p,
        "--solver",
        action="append",
        required=True,
        metavar="MODEL[,BASE_URL[,API_KEY_ENV]]",
        help="a model of the filter (repeat; paper: gpt-5-mini, gemini-2.5-flash, doubao-seed-1.6); default "
        "endpoint --api_base_url / $OPENAI_BASE_URL, key $OPENAI_API_KEY",
        kind=Kind.RESULT,
    )
    add_api_flags(p, env="main")
    setting(
        p,
        "--drop_when",
        default="all",
        help="drop items solved by 'all' models (paper), 'any', or N models",
        kind=Kind.RESULT,
    )
    setting(
        p,
        "--attempts",
        type=int,
        default=1,
        help="answers per model (default 1); a model solves an item when any of its answers is judged correct",
        kind=Kind.RESULT,
    )
    add_separate_requests_flag(p, what="attempt", count_flag="--attempts")
    keys, urls = ENV_KEYS["judge"]
    add_judge_flags(
        p,
        model_help="default: gpt-5-nano",
        url_help="default: " + ", then ".join(f"${n}" for n in urls) + ", then the first solver's endpoint",
        key_help="default: " + ", then ".join(f"${n}" for n in keys) + ", then the first solver's key (each only "
        "where the judge is on the host the key belongs to)",
    )
    add_key_host_flag(p)
    _step_flags(p, concurrency=16, parse_retries=False, images=True)


def _review_flags(sub: Any, formatter: Any) -> None:
    """The ``review`` subcommand and its flags."""
    p = sub.add_parser("review", help="review pages and decisions")
    p.formatter_class = formatter
    rsub = p.add_subparsers(dest="review_step", required=True, metavar="ACTION")
    q = rsub.add_parser("page", help="write an HTML page and a decisions file per batch")
    _workspace(q)
    q.add_argument("--batch_size", type=int, default=50)
    q.add_argument("--max_px", type=int, default=1200, help="longer side of the images on the page")
    q.add_argument(
        "--overwrite_decisions", action="store_true", help="rewrite existing decisions files (default: keep them)"
    )
    q.add_argument(
        "--allow_partial",
        action="store_true",
        help="write the pages while some candidates have not been through the filter (default: refuse)",
    )
    q = rsub.add_parser("apply", help="apply decisions files (edits validated again)")
    _workspace(q)
    q.add_argument("--decisions", nargs="+", default=None, help="default: every review/batch_*.decisions.txt")


def _release_flags(sub: Any, formatter: Any) -> None:
    """The ``release`` subcommand and its flags."""
    p = sub.add_parser("release", help="shuffle options, write metadata.jsonl + images, stats, run card")
    p.formatter_class = formatter
    _workspace(p)
    setting(p, "--seed", type=int, default=0, help="seed of the A-E option shuffle", kind=Kind.RESULT)
    p.add_argument(
        "--require_all_decided",
        action="store_true",
        help="refuse while a candidate has not been through the filter, a kept item has no review decision or an "
        "item is still pending",
    )


def build_parser() -> argparse.ArgumentParser:
    ap = new_parser(PROG, __doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="step", required=True, metavar="STEP")
    _sources_flags(sub, ap.formatter_class)
    _extract_flags(sub, ap.formatter_class)
    _synthesize_flags(sub, ap.formatter_class)
    _validate_flags(sub, ap.formatter_class)
    _filter_flags(sub, ap.formatter_class)
    _review_flags(sub, ap.formatter_class)
    _release_flags(sub, ap.formatter_class)
    return ap


# ----------------------------------------------------------------------------- the steps
def _settings(a: argparse.Namespace) -> StepSettings:
    from ..o3bench.steps import StepSettings

    return StepSettings(
        rpm=a.rpm,
        tpm=a.tpm,
        adaptive_concurrency=not a.no_adaptive_concurrency,
        parse_retries=getattr(a, "parse_retries", 0),
        retry_failed=not a.no_retry_failed,
        limit=a.limit,
        chat_completion_kwargs=dict(a.chat_completion_kwargs),
        controls=run_controls(a),
    )


def _costs(a: argparse.Namespace, models: dict[str, str | None]) -> CostModel | None:
    return CostModel.from_file(a.price_file, models)


def _print(summary: dict) -> None:
    print(json.dumps(summary, ensure_ascii=False))


def _category_specs(a: argparse.Namespace, ws: Workspace) -> list[src_mod.SourceSpec]:
    """The image types of ``sources``: chart and map (their own flags) and each ``--category``."""
    specs = []
    for subset, minimum in (("chart", a.min_layouts), ("map", a.min_map_layouts)):
        images, layouts = getattr(a, f"{subset}_images"), getattr(a, f"{subset}_layouts")
        if images is None:
            continue
        if a.detect:
            layouts = layouts or str(ws.root / "layouts" / subset)
        if layouts is None:
            raise BuildFileError(f"--{subset}_images needs --{subset}_layouts (the detector's JSON) or --detect")
        specs.append(src_mod.SourceSpec(subset, images, layouts, minimum))
    for spec in a.category or []:
        parts = [x.strip() for x in spec.split(",")]
        if len(parts) not in (3, 4) or not all(parts):
            raise BuildFileError(f"--category {spec!r}: expected NAME,IMAGE_DIR,LAYOUTS[,MIN_LAYOUTS]")
        name = check_category(parts[0], "--category")
        try:
            minimum = int(parts[3]) if len(parts) == 4 else 2
        except ValueError:
            raise BuildFileError(f"--category {spec!r}: MIN_LAYOUTS must be an integer, got {parts[3]!r}") from None
        if minimum < 1:
            raise BuildFileError(f"--category {spec!r}: MIN_LAYOUTS must be at least 1, got {minimum}")
        if any(s.subset == name for s in specs):
            raise BuildFileError(f"--category {name}: the category is given twice")
        specs.append(src_mod.SourceSpec(name, parts[1], parts[2], minimum))
    if not specs:
        raise BuildFileError("give --chart_images, --map_images and/or --category")
    return specs


def run_sources(a: argparse.Namespace) -> int:
    ws = Workspace.at(a.output_dir)
    specs = _category_specs(a, ws)
    with run_lock(ws.root, "build_o3_bench sources"):
        if a.detect:
            for s in specs:
                try:
                    n = src_mod.run_detector(
                        s.image_dir, s.layouts, model_name=a.detector_model, threshold=a.detector_threshold
                    )
                except LayoutError as e:
                    raise LayoutError(f"--detect: {e}") from None
                print(f"layout detector: {n} {s.subset} image(s) -> {s.layouts}", file=sys.stderr)
        kept, skipped = [], []
        for s in specs:
            k, sk = src_mod.collect(s, a.min_score)
            kept += k
            skipped += sk
        src_mod.check_unique(kept)
        write_jsonl_atomic(ws.sources, [s.to_dict() for s in kept])
        write_jsonl_atomic(ws.sources_skipped, skipped)
    by = {s.subset: sum(x.subset == s.subset for x in kept) for s in specs}
    _print({"step": "sources", "kept": len(kept), "kept_by_subset": by, "skipped": len(skipped)})
    return ExitCode.OK


def run_extract(a: argparse.Namespace, ap: argparse.ArgumentParser) -> int:
    from ..o3bench.extraction import extract, tasks_for  # the clients (openai), Pillow: on the step's path only
    from ..o3bench.steps import BenchStepRun, model_card

    ws = Workspace.at(a.output_dir)
    own = extraction_prompt_file(a.extract_prompt) if a.extract_prompt else None
    prompt = own.text if own is not None else EXTRACTION_PROMPT
    # one's own prompt is a result setting through its content (the path may move)
    prompts_sha = {"EXTRACTION_PROMPT": sha256_text(prompt)}
    files = {"EXTRACTION_PROMPT": own.card()} if own is not None else {}
    sources = list(read_sources(ws.require(ws.sources, "sources")).values())
    ep = endpoint_of(a, role=f"{a.step} {a.model}")
    run = BenchStepRun(
        ws,
        _settings(a),
        cost_model=_costs(a, {"extractor": a.model}),
        invocation=invocation_of("build_o3_bench extract", ap, a, skip=("step",), prompts_sha256=prompts_sha),
        card={
            "model": model_card(a.model, ep),
            "prompts_sha256": prompts_sha,
            **({"prompt_files": files} if files else {}),
            "prompt_role": a.extract_prompt_role,
            "max_pixels": a.img_max_pixels,
        },
    )
    result = asyncio.run(
        extract(
            run,
            a.model,
            ep,
            tasks_for(sources),
            max_pixels=a.img_max_pixels or None,
            prompt_role=a.extract_prompt_role,
            prompt=prompt,
        )
    )
    _print(result.summary)
    return result.exit_code


def run_synthesize(a: argparse.Namespace, ap: argparse.ArgumentParser) -> int:
    from ..o3bench.steps import BenchStepRun, model_card
    from ..o3bench.synthesis import synthesize

    ws = Workspace.at(a.output_dir)
    templates, files = synthesis_templates(a.synth_prompt)
    prompts_sha = {synthesis_prompt_name(c): sha256_text(t) for c, t in templates.items()}
    sources = list(read_sources(ws.require(ws.sources, "sources")).values())
    missing = sorted({s.subset for s in sources} - set(templates))
    if missing:
        raise BuildFileError(
            f"{ws.sources}: images of category {missing[0]!r} but no E.2 prompt for it: pass --synth_prompt "
            f"{missing[0]}=FILE (the shipped prompts: {', '.join(SYNTHESIS_PROMPTS)}; see data/README.md)"
        )
    ws.require(ws.records("extract"), "extract")
    ep = endpoint_of(a, role=f"{a.step} {a.model}")
    run = BenchStepRun(
        ws,
        _settings(a),
        cost_model=_costs(a, {"synthesizer": a.model}),
        invocation=invocation_of("build_o3_bench synthesize", ap, a, skip=("step",), prompts_sha256=prompts_sha),
        card={
            "model": model_card(a.model, ep),
            "prompts_sha256": prompts_sha,
            **({"prompt_files": files} if files else {}),
            "layout_text": a.layout_text,
        },
    )
    result, waiting_note = asyncio.run(
        synthesize(run, a.model, ep, sources, layout_text_mode=a.layout_text, templates=templates)
    )
    _print(result.summary)
    if waiting_note is not None:
        print(f"note: {waiting_note}", file=sys.stderr)
    return result.exit_code


def run_validate(a: argparse.Namespace) -> int:
    from ..o3bench.steps import step_command
    from ..o3bench.validation import validate_workspace

    ws = Workspace.at(a.output_dir)
    rules, origin = load_rules(a.validation_config)
    report = validate_workspace(ws, rules, origin)
    share = report["f_share"]
    _print({k: v for k, v in report.items() if k != "f_share"} | {"f_share": share["overall"]})
    waiting = len(report["images_synthesis_failed"]) + len(report["images_not_synthesized"])
    if waiting:
        print(
            f"note: {waiting} of {report['images']} image(s) have no items yet (synthesis failed or not run): "
            f"run '{step_command(ws, 'synthesize')}' first, then validate again",
            file=sys.stderr,
        )
    if not share["within_limit"]:
        print(
            f"warning: {share['overall']['share']:.1%} of the accepted items have answer F, above the limit "
            f"{share['limit']:.0%} (the paper's: 10%)",
            file=sys.stderr,
        )
    return ExitCode.OK


def run_filter(a: argparse.Namespace, ap: argparse.ArgumentParser) -> int:
    from ..data.reliability import parse_checker
    from ..o3bench.filtering import FilterSpec, drop_threshold, filter_candidates
    from ..o3bench.steps import BenchStepRun, model_card

    ws = Workspace.at(a.output_dir)
    try:
        specs = [parse_checker(s) for s in a.solver]
        drop_threshold(a.drop_when, len(specs))
    except ValueError as e:
        ap.error(str(e))
    if a.attempts < 1:
        ap.error("--attempts must be at least 1")
    if len({m for m, _, _ in specs}) != len(specs):
        ap.error("--solver models must be distinct")
    main_urls = ENV_KEYS["main"][1]
    client = {"timeout": a.client_timeout, "max_retries": a.max_retries}
    solvers = {
        m: Endpoint(
            base_url=base or resolve(a.api_base_url, main_urls),
            api_key=resolve_key(a.api_key if env == "OPENAI_API_KEY" else None, (env,)),
            key_env=None if env == "OPENAI_API_KEY" else env,  # a variable the user named must be set
            **client,
        )
        for m, base, env in specs
    }
    first = next(iter(solvers.values()))
    judge_url = sourced(a.judge_api_base_url, "--judge_api_base_url", ENV_KEYS["judge"][1])
    if judge_url.value is None:
        judge_url = Sourced(first.base_url, "the first solver's endpoint")
    first_key_env = specs[0][2]
    first_url = Sourced(first.base_url, "the first solver's endpoint")
    first_key = sourced(a.api_key if first_key_env == "OPENAI_API_KEY" else None, "--api_key", (first_key_env,))
    own = sourced(resolve_key(a.judge_api_key, ("JUDGE_API_KEY",), flag="--judge_api_key"), "--judge_api_key", ())
    if own.value is None and first_key_env != "OPENAI_API_KEY":  # $OPENAI_API_KEY where it belongs
        own = borrowed_key(
            "judge", judge_url, own, "$OPENAI_BASE_URL endpoint", sourced(None, "", ("OPENAI_BASE_URL",)),
            sourced(None, "", ("OPENAI_API_KEY",)), a.allow_key_to_other_host,
        )  # fmt: skip
    judge_key = borrowed_key("judge", judge_url, own, "first solver", first_url, first_key, a.allow_key_to_other_host)
    for model, ep in solvers.items():
        url_of = Sourced(ep.base_url, "--solver")
        key_of = Sourced(ep.api_key, f"${ep.key_env or 'OPENAI_API_KEY'}")
        log.info("endpoints: %s", describe(f"solver {model}", url_of, key_of))
    log.info("endpoints: %s", describe("judge", judge_url, judge_key))
    judge = Endpoint(base_url=judge_url.value, api_key=judge_key.value, **client)
    sources = read_sources(ws.require(ws.sources, "sources"))
    items = read_items(ws.require(ws.candidates, "validate"), "validate/candidates.jsonl")
    costs = _costs(a, {**{m: m for m in solvers}, "judge": a.judge_model})
    spec = FilterSpec(
        solvers,
        a.judge_model,
        judge,
        attempts=a.attempts,
        drop_when=a.drop_when,
        separate_attempt_requests=a.separate_trial_requests,
    )
    run = BenchStepRun(
        ws,
        _settings(a),
        cost_model=costs,
        invocation=invocation_of("build_o3_bench filter", ap, a, skip=("step",)),
        card={
            "models": [model_card(m, ep) for m, ep in solvers.items()],
            "judge": model_card(a.judge_model, judge),
            "attempts": a.attempts,
            "drop_when": a.drop_when,
            "request": "evaluate's single-model request (model default system prompt, detail high)",
        },
    )
    result = asyncio.run(filter_candidates(run, spec, sources, items))
    _print(result.summary)
    return result.exit_code


def run_review_page(a: argparse.Namespace) -> int:
    from ..o3bench.filtering import filter_coverage
    from ..o3bench.review import batches, template
    from ..o3bench.steps import InputNotReady, read_log, step_command
    from ..viz.review_page import render_review_page  # the viewers are only needed here

    ws = Workspace.at(a.output_dir)
    if a.batch_size < 1:
        raise BuildFileError("--batch_size must be at least 1")
    with run_lock(ws.root, "build_o3_bench review page"):
        items = read_items(ws.require(ws.kept, "filter"), "filter/kept.jsonl")
        cov = filter_coverage(ws)
        if cov.unfiltered and not a.allow_partial:
            raise InputNotReady(
                f"{cov.describe()}: run '{step_command(ws, 'filter')}' first, or pass --allow_partial to review "
                f"what the {cov.candidates - cov.unfiltered} filtered one(s) kept now"
            )
        if cov.unfiltered:
            print(
                f"warning: {cov.describe()}; these pages hold only what the filtered ones kept: run 'review page' "
                f"again after '{step_command(ws, 'filter')}'",
                file=sys.stderr,
            )
        sources = read_sources(ws.require(ws.sources, "sources"))
        records = read_log(ws.records("filter"))
        groups = batches(items, a.batch_size)
        os.makedirs(ws.step("review"), exist_ok=True)
        kept_files = 0
        for k, group in enumerate(groups, start=1):
            dec = ws.decisions_file(k)
            html = render_review_page(
                group,
                sources,
                records,
                batch=k,
                n_batches=len(groups),
                decisions_name=dec.name,
                workspace=str(ws.root),
                max_px=a.max_px,
            )
            write_text_atomic(ws.review_page(k), html)
            if dec.exists() and not a.overwrite_decisions:
                kept_files += 1
                continue
            write_text_atomic(dec, template(group, k, len(groups), ws.review_page(k).name))
    _print(
        {
            "step": "review page",
            "items": len(items),
            "batches": len(groups),
            "decisions_files_kept": kept_files,
            "unfiltered": cov.unfiltered,
        }
    )
    return ExitCode.OK


def run_review_apply(a: argparse.Namespace) -> int:
    from ..o3bench.review import apply_workspace

    counts = apply_workspace(Workspace.at(a.output_dir), a.decisions)
    _print({"step": "review apply", **counts})
    return ExitCode.OK


def run_release(a: argparse.Namespace) -> int:
    from ..o3bench.release import release_workspace

    out = release_workspace(Workspace.at(a.output_dir), a.seed, a.require_all_decided)
    notes = out.pop("notes")
    _print({"step": "release", **out})
    for line in notes:
        print(f"note: {line}", file=sys.stderr)
    return ExitCode.OK


@entry_point
def main(argv: list[str] | None = None) -> int:
    setup_logging()
    ap = build_parser()
    a = ap.parse_args(sys.argv[1:] if argv is None else argv)
    check_run_flags(ap, a)
    for name in ("limit", "max_cost", "max_tokens_total", "rpm", "tpm"):
        v = getattr(a, name, None)
        if v is not None and v <= 0:
            ap.error(f"--{name} must be positive")
    if getattr(a, "max_cost", None) is not None and not a.price_file:
        ap.error("--max_cost needs --price_file")
    if getattr(a, "parse_retries", 0) < 0:
        ap.error("--parse_retries must not be negative")
    steps = {
        "sources": run_sources,
        "extract": lambda a: run_extract(a, ap),
        "synthesize": lambda a: run_synthesize(a, ap),
        "validate": run_validate,
        "filter": lambda a: run_filter(a, ap),
        "release": run_release,
    }
    if a.step == "review":
        body = run_review_page if a.review_step == "page" else run_review_apply
    else:
        body = steps[a.step]
    from ..o3bench.review import DecisionsError  # the steps' libraries: after the flags are parsed

    bad_input = (LayoutError, BuildFileError, DecisionsError, PriceError, KeyHostError)
    results = os.path.join(a.output_dir, a.step if a.step in ("extract", "synthesize", "filter") else "")
    return run_main(lambda: body(a), bad_input=bad_input, results=results.rstrip(os.sep))


if __name__ == "__main__":
    sys.exit(main())
