#!/usr/bin/env python
"""Build the tiny random-weight Qwen2.5-VL test checkpoint (see tests/support/tiny_qwen.py).

    python scripts/make_tiny_qwen2_5_vl.py OUT_DIR [--seed 0] [--max-pixels 1003520]

Prints a JSON summary (path, parameter count, tokenizer size, special token ids).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from tests.support.tiny_qwen import DEFAULT_MAX_PIXELS, SPECIAL_TOKENS, build_tiny_qwen  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    ap.add_argument("out_dir")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--max-pixels",
        type=int,
        default=DEFAULT_MAX_PIXELS,
        help="image processor max_pixels written to preprocessor_config.json",
    )
    args = ap.parse_args(argv)
    # stdout carries only the JSON summary: libraries that log to stdout when imported (DeepSpeed's accelerator
    # notice, pulled in by transformers where the `dpo` extra is installed) are sent to stderr instead
    with contextlib.redirect_stdout(sys.stderr):
        path = build_tiny_qwen(args.out_dir, seed=args.seed, max_pixels=args.max_pixels)

        from safetensors import safe_open
        from transformers import AutoTokenizer

        with safe_open(str(path / "model.safetensors"), "pt") as f:
            params = sum(_prod(f.get_slice(k).get_shape()) for k in f.keys())
        tok = AutoTokenizer.from_pretrained(path)
    print(
        json.dumps(
            {
                "path": str(path),
                "params": params,
                "len_tokenizer": len(tok),
                "special_ids": {t: tok.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS},
            },
            indent=1,
        )
    )
    return 0


def _prod(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


if __name__ == "__main__":
    sys.exit(main())
