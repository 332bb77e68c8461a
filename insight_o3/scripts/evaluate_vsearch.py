"""Standalone vSearcher localization evaluation (no vReasoner).

    python -m insight_o3.scripts.evaluate_vsearch --ann_file regions.jsonl --img_dir images \\
        --model m-Just/InSight-o3-vS --api_base_url http://localhost:8000/v1

Each annotation line is a JSON object with the image (``image`` or ``file_name``, relative to
``--img_dir``), the region description (``description``, ``region_description`` or ``target``) and
the ground-truth ``bbox`` ``[x1, y1, x2, y2]`` in original-image pixels; an optional ``id`` keys it.
Results go to ``<output_dir>/records.jsonl`` (one line per sample, appended durably as each
finishes; a rerun resumes and re-tries samples lost to API failures) and ``metrics.json``: mean
IoU, accuracy at IoU >= 0.5, format-valid rate, mean tool calls and not-found rate.

The engine (annotation format, scoring, metrics, resume) is :mod:`insight_o3.evaluation.vsearch_eval`.

Exit status (:class:`insight_o3.scripts._shared.ExitCode`): 0 done; 1 some samples were lost to API failures (rerun
to retry them); 2 bad input; 3 an output could not be written; 4 stopped by the API (a 401/403/404 from
the vSearcher endpoint or more than ``--max_failure_ratio`` failed requests); 5 another run holds
``<output_dir>``. Each stop prints one line; finished samples are kept.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys

from ..base.setting_kinds import Kind
from ..endpoints.defaults import DEFAULT_MAX_RETRIES
from ..imaging.geometry import QWEN_MIN_PIXELS, VSEARCHER_EVAL_MAX_PIXELS
from ..protocol.limits import LIMITS
from ._shared import (
    OUTPUT_ROOT,
    add_allow_outside_flag,
    add_api_flags,
    add_cap_flags,
    add_client_flags,
    add_output_dir,
    add_run_flags,
    add_token_budget_flag,
    add_vsearcher_flags,
    check_output_names,
    check_run_flags,
    endpoint_of,
    entry_point,
    flag_kinds,
    new_parser,
    non_empty,
    run_controls,
    run_main,
    setting,
    setup_logging,
)

__all__ = ["main", "build_parser"]


def build_parser() -> argparse.ArgumentParser:
    parts = __doc__.split("\n\n")
    # --help shows the input format and the exit codes (the docstring's 3rd and 5th paragraphs)
    p = new_parser("python -m insight_o3.scripts.evaluate_vsearch", parts[0], epilog="\n\n".join(parts[2:5:2]))
    setting(p, "--ann_file", required=True, kind=Kind.OPERATIONAL)
    setting(
        p,
        "--img_dir",
        required=True,
        help="directory the annotation's image paths are relative to",
        kind=Kind.OPERATIONAL,
    )
    add_allow_outside_flag(p)
    setting(
        p, "--model", type=non_empty, required=True, help="the vSearcher model name on the server", kind=Kind.RESULT
    )
    add_api_flags(p, env="vsearcher")
    add_vsearcher_flags(p, default_max_pixels=VSEARCHER_EVAL_MAX_PIXELS, aliases=True)
    setting(p, "--max_tool_calls", type=int, default=LIMITS.max_tool_calls, kind=Kind.RESULT)
    setting(
        p,
        "--chat_completion_kwargs",
        type=json.loads,
        default={},
        help='JSON object, e.g. \'{"max_tokens": 4096}\' (temperature defaults to 0)',
        kind=Kind.RESULT,
    )
    add_output_dir(p, help=f"default: {OUTPUT_ROOT}/vsearch/<model>")
    add_client_flags(p, max_retries=DEFAULT_MAX_RETRIES)
    add_run_flags(p, concurrency=16)
    add_token_budget_flag(p)
    add_cap_flags(p)
    return p


@entry_point
def main(argv: list[str] | None = None) -> int:
    setup_logging()
    p = build_parser()
    a = p.parse_args(argv)
    from ..evaluation.vsearch_eval import AnnotationError, VSearchEvalSettings, load_regions, run
    from ..storage.record_log import RecordFileError

    if not isinstance(a.chat_completion_kwargs, dict) or "n" in a.chat_completion_kwargs:
        p.error("--chat_completion_kwargs must be a JSON object without 'n'")
    check_run_flags(p, a)
    if a.max_tool_calls < 1 or a.vsearcher_max_pixels < QWEN_MIN_PIXELS:
        p.error(f"--max_tool_calls >= 1 and --vsearcher_max_pixels >= {QWEN_MIN_PIXELS} are required")
    endpoint = endpoint_of(a, "vsearcher", role="vSearcher")
    a.api_base_url = endpoint.base_url  # args.json holds the resolved address, never the key
    if not a.output_dir:  # the model's name is a folder below outputs/vsearch: it must not leave it
        check_output_names(p, model=a.model.replace("/", "__"))
        a.output_dir = os.path.join(OUTPUT_ROOT, "vsearch", a.model.replace("/", "__"))
    settings = VSearchEvalSettings(
        model=a.model,
        output_dir=a.output_dir,
        endpoint=endpoint,
        max_pixels=a.vsearcher_max_pixels,
        prompt=a.vsearcher_prompt,
        max_tool_calls=a.max_tool_calls,
        chat_completion_kwargs=a.chat_completion_kwargs,
        max_reply_chars=a.max_reply_chars,
        max_decode_values=a.max_decode_values,
        ann_file=a.ann_file,
        controls=run_controls(a),
    )

    def body() -> int:
        samples = load_regions(a.ann_file, a.img_dir, allow_outside=a.allow_outside_img_dir)
        result = asyncio.run(
            run(
                settings, samples, args_record={k: v for k, v in vars(a).items() if k != "api_key"}, kinds=flag_kinds(p)
            )
        )
        print(json.dumps(result.summary, indent=2))
        if result.incomplete:
            print(
                f"warning: {result.incomplete} sample(s) lost to API failures; run again to retry them", file=sys.stderr
            )
        return result.exit_code

    return run_main(
        body,
        bad_input=(AnnotationError, RecordFileError),
        results=os.path.join(a.output_dir, "records.jsonl"),
    )


if __name__ == "__main__":
    sys.exit(main())
