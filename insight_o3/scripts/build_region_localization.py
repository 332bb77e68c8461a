"""Region-localization data (Appendix C.2): layout filtering/merging, then region descriptions.

    python -m insight_o3.scripts.build_region_localization --layouts layouts/ --image_dir infographicvqa/ \\
        --output_dir out/region_localization --model gpt-5-nano --concurrency 32

Writes, under ``--output_dir``:

* ``boxes.jsonl``: the layout boxes kept by the C.2 rules (rewritten atomically each run; cheap);
* ``descriptions.jsonl``: one record per box as it finishes (``status`` ok/failed; the resume log);
* ``regions.jsonl``: the final rows (:class:`insight_o3.data.schema.RegionRow`, successes only),
  written atomically at the end, in ``boxes.jsonl`` order.

``--layouts`` is a directory of PaddleOCR ``*.json`` results, one ``.json`` or a ``.jsonl`` with one
result per line (see :mod:`insight_o3.data.layout`). API key and base URL: ``--api_key`` /
``--api_base_url`` or ``OPENAI_API_KEY`` / ``OPENAI_BASE_URL``.

The engine is :func:`insight_o3.data.region_localization.build_regions`.

Exit status (:class:`insight_o3.scripts._shared.ExitCode`): 0 done; 1 some boxes have no description yet (lost to
API errors; rerun to retry them); 2 bad input (a layout file, a missing image); 3 an output could not be
written; 4 stopped by the API (a 401/403/404 or more than ``--max_failure_ratio`` failed requests); 5
another run holds ``--output_dir``. Each stop prints one line and keeps every finished description.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import sys
from typing import TYPE_CHECKING

from ..base.setting_kinds import Kind, field_kinds
from ..data.layout import LayoutRules
from ._shared import (
    ExitCode,
    add_api_flags,
    add_client_flags,
    add_image_budget_flag,
    add_output_dir,
    add_run_flags,
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

if TYPE_CHECKING:
    from ..data.region_localization import LayoutInput

log = logging.getLogger("build_region_localization")


def build_parser() -> argparse.ArgumentParser:
    ap = new_parser(
        "python -m insight_o3.scripts.build_region_localization",
        "C.2 region-localization data: layout rules + region descriptions.",
    )
    setting(
        ap,
        "--layouts",
        required=True,
        help="dir of PaddleOCR layout *.json, a .json or a .jsonl",
        kind=Kind.OPERATIONAL,
    )
    setting(ap, "--image_dir", default=None, help="where the images named by input_path are", kind=Kind.OPERATIONAL)
    add_output_dir(ap, dest="out_dir", required=True, help="boxes.jsonl, descriptions.jsonl, regions.jsonl go here")
    setting(ap, "--source", default="infographicvqa", kind=Kind.RESULT)
    setting(ap, "--model", type=non_empty, default="gpt-5-nano", kind=Kind.RESULT)
    add_api_flags(ap, env="main", aliases=True)
    add_client_flags(ap, max_retries=5, client_timeout=300.0, aliases=True)
    add_image_budget_flag(ap, default=1280 * 1280, help="image sent downscaled under this (0: as is)")
    setting(ap, "--max_tokens", type=int, default=None, kind=Kind.RESULT)
    setting(ap, "--temperature", type=float, default=None, kind=Kind.RESULT)
    setting(
        ap,
        "--no_retry_failed",
        action="store_true",
        help="keep failures of earlier runs as they are",
        kind=Kind.OPERATIONAL,
    )
    setting(ap, "--limit", type=int, default=None, help="only the first N boxes", kind=Kind.OPERATIONAL)
    setting(ap, "--layout_only", action="store_true", help="write boxes.jsonl and stop", kind=Kind.OPERATIONAL)
    add_run_flags(ap, concurrency=16, image_workers=False)
    add_token_budget_flag(ap)
    g = ap.add_argument_group("C.2 layout rules")
    kinds = field_kinds(LayoutRules)
    for f in dataclasses.fields(LayoutRules):
        setting(g, f"--{f.name}", type=float, default=f.default, help=f"default: {f.default}", kind=kinds[f.name])
    return ap


def _layout_only(a: argparse.Namespace, inputs: LayoutInput) -> int:
    from ..data.region_localization import BOXES_FILE, collect_boxes, write_boxes
    from ..storage.lock import run_lock

    with run_lock(a.out_dir, "build_region_localization"):
        tasks = collect_boxes(inputs.layouts, inputs.image_dir, inputs.rules, inputs.source, not a.no_progress)
        tasks = tasks[: inputs.limit] if inputs.limit is not None else tasks
        write_boxes(os.path.join(a.out_dir, BOXES_FILE), tasks)
        log.info("%d layout boxes kept", len(tasks))
    return ExitCode.OK


@entry_point
def main(argv: list[str] | None = None) -> int:
    setup_logging()
    ap = build_parser()
    a = ap.parse_args(argv)
    from ..data.describe import DescribeConfig
    from ..data.layout import LayoutError
    from ..data.region_localization import COMMAND, DESCRIPTIONS_FILE, LayoutInput, build_regions
    from ..jobs.integrity import sha256_path

    check_run_flags(ap, a)
    inputs = LayoutInput(
        layouts=a.layouts,
        image_dir=a.image_dir,
        rules=LayoutRules(**{f.name: getattr(a, f.name) for f in dataclasses.fields(LayoutRules)}),
        source=a.source,
        limit=a.limit,
    )
    endpoint = endpoint_of(a, role=f"describer {a.model}")
    if not a.layout_only and endpoint.base_url is None:
        ap.error(
            "the describer has no default endpoint: give --api_base_url (or $OPENAI_BASE_URL), e.g. "
            "https://api.openai.com/v1 for the paper's GPT model, and --model"
        )
    cfg = DescribeConfig(
        model=a.model,
        max_pixels=a.img_max_pixels or None,
        max_tokens=a.max_tokens,
        temperature=a.temperature,
        retry_failed=not a.no_retry_failed,
    )

    def body() -> int:
        if a.layout_only:
            return _layout_only(a, inputs)
        inv = invocation_of(COMMAND, ap, a, layouts_sha256=sha256_path(a.layouts))
        result = build_regions(a.out_dir, inputs, cfg, endpoint, run_controls(a), inv)
        print(json.dumps(result.summary))
        if result.incomplete:
            log.warning(
                "%d boxes have no description yet (see descriptions.jsonl); rerun to retry them", result.incomplete
            )
        return result.exit_code

    return run_main(body, bad_input=(LayoutError,), results=os.path.join(a.out_dir, DESCRIPTIONS_FILE))


if __name__ == "__main__":
    sys.exit(main())
