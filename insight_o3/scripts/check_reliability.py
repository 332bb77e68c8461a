"""C.1 MLLM reliability check of a collage source pool (see :mod:`insight_o3.data.reliability`).

    python -m insight_o3.scripts.check_reliability --source_pool pool.jsonl --out_dir out/reliability \\
        --checker "Qwen/Qwen2.5-VL-7B-Instruct,http://localhost:8000/v1,VLLM_API_KEY" --checker gpt-5-nano
"""
from __future__ import annotations

import logging
import sys

from ..data.reliability import main as reliability_main


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    return reliability_main(sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    sys.exit(main())
