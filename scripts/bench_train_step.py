"""Benchmark of one recipe training step's cost on CPU: the real driver (``train.sh`` -> verl -> the recipe, as in
``tests/recipe/test_driver_vllm.py``) for a few steps at D.1-like image sizes, with probes that measure per step:

* ``wall_s``: verl's ``timing_s/step``;
* ``driver_peak_rss_mb``: the peak RSS of the driver (verl's TaskRunner process, which holds the step's batch);
* ``object_store_mb``: bytes put into Ray's object store during the step (the raylet's
  ``cumulative_created_bytes``; objects under 100 KB travel inline and are not counted);
* ``mm_inputs_mb``: the distinct tensor bytes of the batch's ``multi_modal_inputs`` in the driver
  (the recipe's ``vsearch/mm_inputs_mb``);
* ``actor_passes_per_row`` / ``ref_passes_per_row``: rows the actor's (old log-probs, update) and the reference's
  ``DataParallelPPOActor._forward_micro_batch`` ran, over the step's training rows.

``--tree`` runs another checkout's recipe (e.g. a worktree of an older commit) with the same probes, so that
"before" and "after" are measured in one sitting:

    git worktree add --detach /tmp/before <old commit>
    PYTHONPATH=.:verl .venv/bin/python scripts/bench_train_step.py --work /tmp/bench --tree /tmp/before --label before
    PYTHONPATH=.:verl .venv/bin/python scripts/bench_train_step.py --work /tmp/bench --label after

Each run appends its rows to ``<work>/bench.jsonl`` and prints the markdown table of every run there. The images
are the CPU run's, enlarged to ``--image-side`` px (default 2464 x 1848, which the vSearcher's D.1 budget of
3,211,264 px shows at 2072 x 1540 = 4070 image tokens); the tiny model's processor is allowed that budget. It is
a benchmark, not a test: the numbers depend on the machine and on what else runs on it.

On a 24 GB machine the D.1 budget runs out of memory in the actor update (without remove-padding every row is padded
to prompt + response length, and the logits of a 9K-token row over the 151,936-token vocabulary take ~5.6 GB in
fp32); the recipe README's table was measured with ``--max-pixels 802816 --prompt-length 2048
--response-length 1024`` (1024-token images, a quarter of D.1's): the image bytes scale with the image tokens.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from pathlib import Path

ENV_OUT = "VSEARCH_BENCH_DIR"
D1_MAX_PIXELS = 3_211_264
HERE = Path(__file__).resolve().parent
#: the CPU training venv (scripts/setup.sh --train) of this checkout, also for a benchmarked ``--tree``
TRAIN_PYTHON = Path(os.environ.get("TRAIN_VENV", HERE.parent / ".venvs" / "train-cpu")) / "bin" / "python"


# ----------------------------------------------------------------------------- probes (every Ray process)
def setup_worker() -> None:
    """``worker_process_setup_hook`` of the benchmarked run: the CPU shims, then the probes."""
    from recipe.vsearch.cpu.setup import setup_worker as cpu_setup

    cpu_setup()
    if os.environ.get(ENV_OUT):
        install_probes(Path(os.environ[ENV_OUT]))


def _append(out: Path, record: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with open(out / f"probe-{os.getpid()}.jsonl", "a") as f:
        f.write(json.dumps(record) + "\n")


def _store_created_bytes() -> int | None:
    try:
        from ray._private.internal_api import get_memory_info_reply, get_state_from_address

        return int(get_memory_info_reply(get_state_from_address()).store_stats.cumulative_created_bytes)
    except Exception:  # not connected (yet)
        return None


def install_probes(out: Path) -> None:
    """Count the rows each policy forwards (FSDP workers) and record the driver's RSS peak and Ray's object
    store bytes at every logged step (TaskRunner)."""
    from verl.utils.tracking import Tracking
    from verl.workers.actor.dp_actor import DataParallelPPOActor

    if getattr(DataParallelPPOActor, "_bench_probe", False):
        return
    forward = DataParallelPPOActor._forward_micro_batch

    def counted(self, micro_batch, temperature, calculate_entropy=False):
        role = "ref" if self.actor_optimizer is None else "actor"
        _append(
            out, {"kind": "forward", "role": role, "rows": int(micro_batch["input_ids"].shape[0]), "t": time.time()}
        )
        return forward(self, micro_batch, temperature, calculate_entropy=calculate_entropy)

    DataParallelPPOActor._forward_micro_batch = counted
    DataParallelPPOActor._bench_probe = True
    init, log = Tracking.__init__, Tracking.log

    def tracking_init(self, *args, **kwargs):
        init(self, *args, **kwargs)
        _append(out, {"kind": "start", "t": time.time(), "store_bytes": _store_created_bytes()})

    def tracking_log(self, data, step, *args, **kwargs):
        rss_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        keys = ("timing_s/step", "vsearch/mm_inputs_mb", "vsearch/mm_inputs_row_max_mb")
        record = {
            "kind": "step",
            "step": int(step),
            "t": time.time(),
            "peak_rss_kb": rss_kb,
            "store_bytes": _store_created_bytes(),
            "rows": _rows(data),
            **{k: float(data[k]) for k in keys if k in data},
        }
        _append(out, record)
        return log(self, data, step, *args, **kwargs)

    Tracking.__init__, Tracking.log = tracking_init, tracking_log


def _rows(data: dict) -> int | None:
    # the training rows of the step: the sample count verl's data metrics were computed over is not logged; the
    # recipe logs its padding/in-loop/out-of-loop counts
    keys = ("vsearch/inloop_samples", "vsearch/outloop_samples", "vsearch/padding_rows")
    if not any(k in data for k in keys):
        return None
    return int(sum(float(data.get(k, 0.0)) for k in keys))


# ----------------------------------------------------------------------------- the run
def enlarge_images(image_dir: Path, size: tuple[int, int]) -> None:
    from PIL import Image

    for path in sorted(image_dir.glob("*.png")):
        with Image.open(path) as im:
            im.convert("RGB").resize(size, Image.Resampling.NEAREST).save(path)


def allow_pixels(model_dir: Path, max_pixels: int) -> None:
    """Let the tiny model's processor take the vSearcher's images as they are (as Qwen2.5-VL-7B's 12.8M-px
    processor does the D.1 budgets)."""
    for name in ("preprocessor_config.json", "processor_config.json"):
        path = model_dir / name
        if not path.exists():
            continue
        cfg = json.loads(path.read_text())
        target = cfg.get("image_processor", cfg)
        target["max_pixels"] = max_pixels
        if isinstance(target.get("size"), dict):
            target["size"]["longest_edge"] = max_pixels
        path.write_text(json.dumps(cfg, indent=2))


def run(args) -> list[dict]:
    tree = Path(args.tree).resolve() if args.tree else HERE.parent
    sys.path[:0] = [str(tree), str(tree / "verl")]
    import yaml

    from tests.support import recipe_cpu_run as rc
    from tests.support.openai_server import ScriptedOpenAIServer

    rc.VERL_DIR = tree / "verl"  # the benchmarked recipe
    work = Path(args.work).resolve()
    data = work / "inputs"
    inputs = rc.build_inputs(data)  # writes the CPU run's small images every time (the model is built once)
    enlarge_images(data / "images", tuple(args.image_side))
    allow_pixels(Path(inputs["model"]), 12_845_056)
    agent = yaml.safe_load(rc.agent_config(data).read_text())
    agent["vsearcher"].update(max_pixels_train=args.max_pixels, max_pixels_eval=args.max_pixels)
    (data / "agent_cpu.yaml").write_text(yaml.safe_dump(agent, sort_keys=False))
    rc.agent_config = lambda _work: data / "agent_cpu.yaml"

    label = args.label or tree.name
    run_dir = work / label
    probes = run_dir / "probes"
    os.environ[ENV_OUT] = str(probes)
    os.environ["PYTHONPATH"] = os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])
    hook = "+ray_kwargs.ray_init.runtime_env.worker_process_setup_hook="
    import recipe.vsearch.cpu.overrides as cpu_overrides  # run_train imports cpu_overrides from here when it runs

    cpu = cpu_overrides.cpu_overrides

    def overrides(n_gpus, **kwargs):
        return [o if not o.startswith(hook) else f"{hook}bench_train_step.setup_worker" for o in cpu(n_gpus, **kwargs)]

    cpu_overrides.cpu_overrides = overrides
    prompt, response = args.prompt_length, args.response_length
    run_dir.mkdir(parents=True, exist_ok=True)
    with ScriptedOpenAIServer(rc.vreasoner_script()) as srv:
        res = rc.run_train(
            run_dir,
            inputs,
            srv.base_url,
            "run",
            [
                f"trainer.total_training_steps={args.steps}",
                "trainer.save_freq=-1",
                "trainer.test_freq=-1",
                "trainer.val_before_train=False",
                f"data.max_prompt_length={prompt}",
                f"data.max_response_length={response}",
                f"actor_rollout_ref.actor.ppo_max_token_len_per_gpu={prompt + response}",
                f"actor_rollout_ref.rollout.max_num_batched_tokens={prompt + response}",
                f"actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu={prompt + response}",
                f"actor_rollout_ref.ref.log_prob_max_token_len_per_gpu={prompt + response}",
            ],
            timeout=args.timeout,
            python=args.python or str(TRAIN_PYTHON),
        )
    if res.rc != 0:
        raise SystemExit(f"the benchmarked run failed (rc {res.rc}); its log: {run_dir / 'run.log'}\n{res.log[-4000:]}")
    return summarise(label, probes)


def summarise(label: str, probes: Path) -> list[dict]:
    records = [json.loads(line) for p in sorted(probes.glob("probe-*.jsonl")) for line in p.read_text().splitlines()]
    starts = [r for r in records if r["kind"] == "start"]
    steps = sorted((r for r in records if r["kind"] == "step"), key=lambda r: r["t"])
    forwards = [r for r in records if r["kind"] == "forward"]
    rows, t0 = [], starts[0]["t"] if starts else 0.0
    prev_store = starts[0]["store_bytes"] if starts else None
    for s in steps:
        window = [f for f in forwards if t0 < f["t"] <= s["t"]]
        n = s.get("rows") or 0
        store = None if s["store_bytes"] is None or prev_store is None else (s["store_bytes"] - prev_store) / 2**20
        rows.append(
            {
                "label": label,
                "step": s["step"],
                "rows": n,
                "wall_s": round(s.get("timing_s/step", float("nan")), 1),
                "driver_peak_rss_mb": round(s["peak_rss_kb"] / 1024, 0),
                "object_store_mb": None if store is None else round(store, 1),
                "mm_inputs_mb": round(s.get("vsearch/mm_inputs_mb", float("nan")), 5),
                "actor_passes_per_row": round(sum(f["rows"] for f in window if f["role"] == "actor") / n, 2)
                if n
                else None,
                "ref_passes_per_row": round(sum(f["rows"] for f in window if f["role"] == "ref") / n, 2) if n else None,
            }
        )
        t0, prev_store = s["t"], s["store_bytes"]
    return rows


COLUMNS = (
    "label",
    "step",
    "rows",
    "wall_s",
    "driver_peak_rss_mb",
    "object_store_mb",
    "mm_inputs_mb",
    "actor_passes_per_row",
    "ref_passes_per_row",
)


def table(rows: list[dict]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(str(r.get(c)) for c in COLUMNS) + " |" for r in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    ap.add_argument("--work", required=True, help="working directory (inputs are built once and reused)")
    ap.add_argument("--tree", help="checkout whose recipe to run (default: this one)")
    ap.add_argument("--label", help="row label (default: the tree's directory name)")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--max-pixels", type=int, default=D1_MAX_PIXELS, help="vSearcher image budget (D.1: 3211264)")
    ap.add_argument("--image-side", type=int, nargs=2, default=[2464, 1848], metavar=("W", "H"))
    ap.add_argument("--prompt-length", type=int, default=5120)
    ap.add_argument("--response-length", type=int, default=8192)
    ap.add_argument("--timeout", type=float, default=3000)
    ap.add_argument("--python", help="interpreter of train.sh (default: the CPU training venv's)")
    args = ap.parse_args(argv)
    rows = run(args)
    out = Path(args.work) / "bench.jsonl"
    with open(out, "a") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    every = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    print(table(every))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
