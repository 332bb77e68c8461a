"""Collage difficulty filter (C.1, pass@k with a vReasoner; any success removes the collage).

    python -m insight_o3.scripts.filter_difficulty --output_dir data/collages --model gpt-5-mini --attempts 3

(also ``python -m insight_o3.scripts.generate_collages filter ...``). Reads
``<output_dir>/collages.jsonl``, appends one record per collage to ``difficulty.jsonl`` and rewrites
``collages_hard.jsonl`` at the end; see :mod:`insight_o3.data.difficulty` for the records and resume.

Exit status (:class:`insight_o3.scripts._shared.ExitCode`): 0 done; 1 some collages are still lost to API errors
(rerun to retry them); 2 bad input; 3 an output could not be written; 4 stopped by the API (401/403/404
or more than ``--max_failure_ratio`` failed requests); 5 another run holds ``--output_dir``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from dataclasses import replace

from ..base.setting_kinds import Kind
from ..protocol.limits import LIMITS
from ._shared import (
    add_api_flags,
    add_client_flags,
    add_image_budget_flag,
    add_judge_flags,
    add_key_host_flag,
    add_output_dir,
    add_run_flags,
    add_separate_requests_flag,
    add_token_budget_flag,
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

PROG = "python -m insight_o3.scripts.filter_difficulty"
log = logging.getLogger("insight_o3.filter_difficulty")


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    ap = new_parser(prog, __doc__.split("\n")[0])
    add_output_dir(ap, dest="out_dir", required=True, help="a generate_collages output directory")
    setting(ap, "--model", type=non_empty, required=True, help="the vReasoner", kind=Kind.RESULT)
    setting(
        ap,
        "--attempts",
        type=int,
        default=LIMITS.difficulty_attempts,
        help=f"pass@k (paper: {LIMITS.difficulty_attempts})",
        kind=Kind.RESULT,
    )
    add_api_flags(ap, env="main", aliases=True)
    add_judge_flags(
        ap,
        model_help="decides answers the rules cannot (default: gpt-5-nano)",
        url_help="default: $JUDGE_API_BASE_URL / $JUDGE_BASE_URL, then the vReasoner's endpoint",
        key_help="default: $JUDGE_API_KEY, then the vReasoner's key where the judge is on its host",
    )
    add_key_host_flag(ap)
    add_separate_requests_flag(ap, what="attempt", count_flag="--attempts")
    add_client_flags(ap, max_retries=5)
    add_image_budget_flag(ap, default=1280 * 1280, help="resize budget; 0 = no limit")
    add_run_flags(ap, concurrency=16)
    add_token_budget_flag(ap)
    return ap


@entry_point
def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    setup_logging()
    ap = build_parser(prog)
    a = ap.parse_args(sys.argv[1:] if argv is None else argv)
    from ..data.difficulty import COMMAND, RECORDS_FILE, CollagesFileError, FilterSettings, run_filter
    from ..endpoints.endpoint import ENV_KEYS, KeyHostError, Sourced, borrowed_key, describe, resolve_key, sourced

    check_run_flags(ap, a)
    if a.attempts < 1 or a.img_max_pixels < 0:
        ap.error("--attempts must be >= 1 and --img_max_pixels >= 0")
    model = endpoint_of(a, role="model")
    model_url = sourced(a.api_base_url, "--api_base_url", ENV_KEYS["main"][1])
    judge_url = sourced(a.judge_api_base_url, "--judge_api_base_url", ("JUDGE_API_BASE_URL", "JUDGE_BASE_URL"))
    if judge_url.value is None and model.base_url:
        judge_url = Sourced(model.base_url, f"the model's endpoint, {model_url.source}")
    try:  # the model's key for the judge only on the model's host
        judge_key = borrowed_key(
            "judge",
            judge_url,
            sourced(resolve_key(a.judge_api_key, ("JUDGE_API_KEY",), flag="--judge_api_key"), "--judge_api_key", ()),
            "model",
            model_url,
            sourced(a.api_key, "--api_key", ENV_KEYS["main"][0]),
            a.allow_key_to_other_host,
        )
    except KeyHostError as e:
        ap.error(str(e))
    log.info("endpoints: %s", describe("judge", judge_url, judge_key))
    judge = replace(model, base_url=judge_url.value, api_key=judge_key.value, key_env=None)
    settings = FilterSettings(
        out_dir=a.out_dir,
        model=a.model,
        endpoint=model,
        judge_model=a.judge_model,
        judge=judge,
        attempts=a.attempts,
        separate_attempt_requests=a.separate_trial_requests,
        max_pixels=a.img_max_pixels,
        controls=run_controls(a),
    )

    def body() -> int:
        result = run_filter(settings, invocation_of(COMMAND, ap, a))
        print(json.dumps(result.summary))
        if result.incomplete:
            print(
                f"warning: {result.incomplete} collage(s) lost to API errors; run again to retry them", file=sys.stderr
            )
        return result.exit_code

    return run_main(body, bad_input=(CollagesFileError,), results=os.path.join(a.out_dir, RECORDS_FILE))


if __name__ == "__main__":
    sys.exit(main())
