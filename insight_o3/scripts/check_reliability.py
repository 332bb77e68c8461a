"""C.1 MLLM reliability check of a collage source pool (see :mod:`insight_o3.data.reliability`).

    python -m insight_o3.scripts.check_reliability --source_pool pool.jsonl --output_dir out/reliability \\
        --checker "Qwen/Qwen2.5-VL-7B-Instruct,http://localhost:8000/v1,VLLM_API_KEY" --checker gpt-5-nano

Exit status (:class:`insight_o3.scripts._shared.ExitCode`): 0 done; 1 some items are still lost to API errors
(rerun to retry them); 2 bad input (flags, the pool); 3 an output could not be written; 4 stopped by the
API (a 401/403/404 or more than ``--max_failure_ratio`` failed requests); 5 another run holds ``--output_dir``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys

from ..base.setting_kinds import Kind
from ._shared import (
    add_client_flags,
    add_image_budget_flag,
    add_judge_flags,
    add_key_host_flag,
    add_output_dir,
    add_run_flags,
    add_token_budget_flag,
    check_run_flags,
    endpoint_of,
    entry_point,
    invocation_of,
    new_parser,
    run_controls,
    run_main,
    setting,
    setup_logging,
)

PROG = "python -m insight_o3.scripts.check_reliability"
log = logging.getLogger("insight_o3.check_reliability")


def build_parser() -> argparse.ArgumentParser:
    ap = new_parser(PROG, "C.1 MLLM reliability check of a collage source pool.")
    setting(
        ap,
        "--source_pool",
        required=True,
        help="pool table (.jsonl or .parquet), see data/source_pool.py",
        kind=Kind.OPERATIONAL,
    )
    setting(
        ap,
        "--image_root",
        default=None,
        help="image paths are relative to this (default: the pool's dir)",
        kind=Kind.OPERATIONAL,
    )
    add_output_dir(ap, dest="out_dir", required=True, help="reliability.jsonl and pool_reliable.jsonl go here")
    # operational: "model,url,ENV" specs; the models are fixed through the derived checker_models
    setting(
        ap,
        "--checker",
        action="append",
        required=True,
        metavar="MODEL[,BASE_URL[,API_KEY_ENV]]",
        help="a checker MLLM (repeat; the paper uses Qwen2.5-VL-7B and GPT-5-nano)",
        kind=Kind.OPERATIONAL,
    )
    add_judge_flags(
        ap,
        model_help="decides answers the rules cannot (default: gpt-5-nano)",
        url_help="default: $JUDGE_API_BASE_URL / $JUDGE_BASE_URL / $OPENAI_BASE_URL",
        key_help="default: $JUDGE_API_KEY, then $OPENAI_API_KEY",
    )
    # the older spelling: the NAME of a variable holding the judge's key (kept working, not shown)
    # operational: the name of a variable holding a key
    setting(ap, "--judge_api_key_env", default=None, help=argparse.SUPPRESS, kind=Kind.OPERATIONAL)
    setting(
        ap,
        "--all_sources",
        action="store_true",
        help="check every item, not only the natural-image stream",
        kind=Kind.RESULT,
    )
    setting(
        ap,
        "--chat_completion_kwargs",
        type=json.loads,
        default={},
        help="JSON object passed to every checker request (e.g. {\"temperature\": 0})",
        kind=Kind.RESULT,
    )
    add_key_host_flag(ap)
    add_client_flags(ap, max_retries=5)
    add_image_budget_flag(ap, default=1280 * 1280, help="resize budget; 0 = no limit")
    setting(
        ap,
        "--skip_image_check",
        action="store_true",
        help="do not open every image when loading the pool",
        kind=Kind.OPERATIONAL,
    )
    add_run_flags(ap, concurrency=16)
    add_token_budget_flag(ap)
    return ap


@entry_point
def main(argv: list[str] | None = None) -> int:
    setup_logging()
    ap = build_parser()
    a = ap.parse_args(sys.argv[1:] if argv is None else argv)
    from ..data.reliability import COMMAND, RECORDS_FILE, ReliabilitySettings, parse_checker, run_check
    from ..data.source_pool import PoolError, load_pool, pool_sha256
    from ..endpoints.endpoint import Endpoint, KeyHostError, Sourced, describe, resolve, resolve_key

    check_run_flags(ap, a)
    if a.img_max_pixels < 0:
        ap.error("--img_max_pixels must not be negative")
    if not isinstance(a.chat_completion_kwargs, dict):
        ap.error("--chat_completion_kwargs must be a JSON object")
    try:
        specs = [parse_checker(s) for s in a.checker]
    except ValueError as e:
        ap.error(str(e))
    if len({m for m, _, _ in specs}) != len(specs):
        ap.error("--checker models must be distinct")
    client = {"timeout": a.client_timeout, "max_retries": a.max_retries}
    checkers = {
        m: Endpoint(
            base_url=resolve(base, ("OPENAI_BASE_URL",)), api_key=resolve_key(None, (env,)), key_env=env, **client
        )
        for m, base, env in specs
    }
    for m, ep in checkers.items():
        where = Sourced(ep.base_url, "the --checker spec" if ep.base_url else "none")
        log.info("endpoints: %s", describe(f"checker {m}", where, Sourced(ep.api_key, f"${ep.key_env}")))
    try:  # $OPENAI_API_KEY only on its own host (the flag, $JUDGE_API_KEY or the variable named are the judge's own)
        judge = endpoint_of(
            a, "judge", prefix="judge_", key_env=None if a.judge_api_key else a.judge_api_key_env, role="judge"
        )
    except KeyHostError as e:
        ap.error(str(e))
    settings = ReliabilitySettings(
        out_dir=a.out_dir,
        checkers=checkers,
        judge_model=a.judge_model,
        judge=judge,
        all_sources=a.all_sources,
        chat_completion_kwargs=a.chat_completion_kwargs,
        max_pixels=a.img_max_pixels,
        controls=run_controls(a),
    )

    def body() -> int:
        items = load_pool(a.source_pool, a.image_root, check_images=not a.skip_image_check)
        models = list(checkers)
        inv = invocation_of(COMMAND, ap, a, checker_models=models, pool_sha256=pool_sha256(items))
        result = run_check(settings, items, inv)
        print(json.dumps(result.summary))
        if result.incomplete:
            print(f"warning: {result.incomplete} item(s) lost to API errors; run again to retry them", file=sys.stderr)
        return result.exit_code

    return run_main(body, bad_input=(PoolError,), results=os.path.join(a.out_dir, RECORDS_FILE))


if __name__ == "__main__":
    sys.exit(main())
