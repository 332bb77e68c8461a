"""GPU unit checks of the recipe's training path without Ray: the acceptance kit's step 1 (``scripts/gpu_acceptance.sh``).

Each check runs on CUDA when a GPU is visible, and on CPU wherever the path exists there (what CI runs):

* the pixel values rebuilt from a row's image references equal the processor's output byte for byte, and reach the
  FSDP2-wrapped model (bf16 mixed precision, ``cast_forward_inputs`` as verl wraps it) on the model's device in bf16;
* the response log-probs of recipe-shaped multi-turn rows (crops, Qwen2.5-VL's 4-row mrope position ids) agree
  between verl's attention paths: eager and SDPA on the padded path (the micro-batch trimmed or not), and on CUDA
  flash-attention-2 with remove-padding (train.sh's path), within bf16 bounds;
* CUDA + vLLM only: vLLM's prompt log-probs on the recipe's token ids and images against the trainer's, and sleep
  (level 2) -> wake -> reload -> the same greedy output, with the engine's memory released while asleep.

Bounds: the paths compute in bf16, whose spacing at the largest |log-prob| p is ``2**(floor(log2 p) - 7)``; two
kernels round differently, so a token may differ by a few spacings: max |diff| <= 4 spacings and mean |diff| < 1e-2
(trainer paths), mean |diff| < 5e-2 between vLLM and the trainer (different kernels and a different model build).
"""

from __future__ import annotations

import copy
import math
import os
import socket

import pytest

from tests.support.stacks import require_recipe

require_recipe()

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from recipe.vsearch.image_inputs import VIEWS_KEY, PixelCache, rebuild, rebuild_pixels_in  # noqa: E402
from recipe.vsearch.padding import trim_padding_in  # noqa: E402
from tests.support.recipe_loops import (  # noqa: E402
    CROPS,
    actor_config,
    expand_rows,
    loop_config,
    region_row,
    scripted_rollout,
    verl_inputs,
)
from verl import DataProto  # noqa: E402

pytestmark = pytest.mark.gpu
CUDA = torch.cuda.is_available()
DEVICES = ["cpu", *(["cuda"] if CUDA else [])]
MEAN_BOUND, ULPS, VLLM_MEAN_BOUND = 1e-2, 4, 5e-2


def needs_cuda() -> None:
    if not CUDA:
        pytest.skip("no CUDA GPU here (scripts/gpu_acceptance.sh runs this on one)")


def bf16_spacing(x: float) -> float:
    """The spacing of bf16 numbers at |x| (8 significant bits)."""
    return 2.0 ** (math.floor(math.log2(max(abs(x), 1e-30))) - 7)


@pytest.fixture(scope="module")
def group():
    """One-process group as verl's workers open it (``cpu:gloo,cuda:nccl`` on a GPU)."""
    if not dist.is_initialized():
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if CUDA:
            torch.cuda.set_device(0)
        backend = "cpu:gloo,cuda:nccl" if CUDA else "gloo"
        dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def _fsdp2(model, device: str):
    """verl's FSDP2 wrapping of the policy (fsdp_workers.py: bf16 params, fp32 reduce, ``cast_forward_inputs``)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32, cast_forward_inputs=True)
    return fully_shard(model.to(device), mesh=init_device_mesh(device, (1,)), mp_policy=mp)


def _rows(policy, noisy_image) -> tuple[DataProto, list]:  # noqa: F811
    """Two recipe-shaped rows: the whole image then three crops of odd sizes, and one crop (multi-turn, masked tool
    responses, 4-row mrope ids), through verl's post-processing (padded to 1,024 + 2,048)."""
    outs = [scripted_rollout(policy, noisy_image), scripted_rollout(policy, noisy_image, CROPS[1:2])]
    cfg = loop_config(prompt_length=1024, response_length=2048)
    rows = DataProto.concat([expand_rows(policy, o, region_row(noisy_image), cfg) for o in outs])
    rows.meta_info.update({"temperature": 1.0, "micro_batch_size": 2, "use_dynamic_bsz": False})
    return rows, outs


def test_rebuilt_pixels_equal_the_processors_and_reach_the_model_in_bf16_on_its_device(
    policy,  # noqa: F811
    noisy_image,  # noqa: F811
    tiny_qwen_dir,
    group,
):
    from transformers import Qwen2_5_VLForConditionalGeneration

    _, proc = policy
    rows, outs = _rows(policy, noisy_image)
    for i, out in enumerate(outs):
        got = rebuild(proc, rows.non_tensor_batch["multi_modal_inputs"][i], PixelCache(2**30))
        want = verl_inputs(policy, out)
        assert torch.equal(got["pixel_values"], want["pixel_values"]) and VIEWS_KEY not in got
    for device in DEVICES:
        model = Qwen2_5_VLForConditionalGeneration.from_pretrained(
            str(tiny_qwen_dir), dtype=torch.float32, attn_implementation="sdpa"
        ).eval()
        seen: list[tuple[torch.dtype, str]] = []

        def hook(module, args, kwargs, seen=seen):
            x = args[0] if args else kwargs["hidden_states"]
            seen.append((x.dtype, x.device.type))

        model.visual.register_forward_pre_hook(hook, with_kwargs=True)
        model = _fsdp2(model, device)
        inputs = rebuild(proc, rows.non_tensor_batch["multi_modal_inputs"][0])
        ids = rows.batch["input_ids"][:1]
        with torch.no_grad():  # the CPU tensors verl hands the model: FSDP2's root pre-forward moves and casts them
            model(
                input_ids=ids,
                attention_mask=rows.batch["attention_mask"][:1],
                pixel_values=inputs["pixel_values"],
                image_grid_thw=inputs["image_grid_thw"],
                use_cache=False,
            )
        assert seen == [(torch.bfloat16, device)], (device, seen)


def _log_probs(tiny_qwen_dir, proc, rows: DataProto, device: str, attn: str, trim: bool = False):
    from transformers import Qwen2_5_VLForConditionalGeneration
    from verl.workers.actor.dp_actor import DataParallelPPOActor

    model = Qwen2_5_VLForConditionalGeneration.from_pretrained(
        str(tiny_qwen_dir), dtype=torch.float32, attn_implementation=attn
    ).eval()
    rmpad = attn == "flash_attention_2"
    if rmpad:  # what verl's FSDP worker does before wrapping (varlen flash-attn over the unpadded tokens)
        from verl.models.transformers.monkey_patch import apply_monkey_patch

        apply_monkey_patch(model=model, use_remove_padding=True, ulysses_sp_size=1)
    actor = DataParallelPPOActor(actor_config(), _fsdp2(model, device))
    actor.use_remove_padding = rmpad
    rebuild_pixels_in(actor, proc)
    if trim:
        trim_padding_in(actor)
    with torch.no_grad():
        lp, _ = actor.compute_log_prob(copy.deepcopy(rows), calculate_entropy=False)
    return lp.float().cpu()


def _agree(a: torch.Tensor, b: torch.Tensor, mask: torch.Tensor, mean_bound: float = MEAN_BOUND) -> tuple[float, float]:
    diff = (a - b)[mask].abs()
    spacing = bf16_spacing(float(b[mask].abs().max()))
    mean, worst = float(diff.mean()), float(diff.max())
    assert mean < mean_bound and worst <= ULPS * spacing, (mean, worst, spacing)
    return mean, worst


@pytest.mark.parametrize("device", DEVICES)
def test_log_probs_agree_across_the_attention_paths(device, policy, noisy_image, tiny_qwen_dir, group):  # noqa: F811
    _, proc = policy
    rows, _ = _rows(policy, noisy_image)
    assert rows.batch["position_ids"].shape[1] == 4  # Qwen2.5-VL's text + 3 mrope rows, as verl builds them
    mask = rows.batch["response_mask"].bool()
    eager = _log_probs(tiny_qwen_dir, proc, rows, device, "eager")
    assert torch.isfinite(eager[mask]).all() and mask.sum() > 20
    report = {"sdpa": _agree(_log_probs(tiny_qwen_dir, proc, rows, device, "sdpa"), eager, mask)}
    report["sdpa+trim"] = _agree(_log_probs(tiny_qwen_dir, proc, rows, device, "sdpa", trim=True), eager, mask)
    if device == "cuda":  # train.sh's path last: verl's monkey patch changes the attention class of the process
        report["flash_attention_2+rmpad"] = _agree(
            _log_probs(tiny_qwen_dir, proc, rows, device, "flash_attention_2"), eager, mask
        )
    print(f"\n[{device}] mean / max |log-prob diff| vs eager: {report}")


# ----------------------------------------------------------------------------- vLLM on CUDA
@pytest.fixture(scope="module")
def engine(tiny_qwen_dir):
    """vLLM 0.12 as verl builds it for the rollout: bf16, CUDA graphs, sleep mode, 7 images, a third of the GPU;
    in this process (its memory is then this process's to measure)."""
    needs_cuda()
    pytest.importorskip("vllm")
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    from vllm import LLM

    free_before = torch.cuda.mem_get_info()[0]
    llm = LLM(
        model=str(tiny_qwen_dir),
        dtype="bfloat16",
        enforce_eager=False,
        enable_sleep_mode=True,
        gpu_memory_utilization=0.3,
        limit_mm_per_prompt={"image": 7},
        max_model_len=8192,
        seed=0,
    )
    yield llm, free_before - torch.cuda.mem_get_info()[0]
    del llm


def _vllm_prompt(out, proc, with_response: bool = True):
    """A rollout as verl's vLLM server hands it to the engine: its ids (``with_response``: the whole row, else the first
    prompt and its image only) with each image's pad run de-duplicated (``_qwen2_5_vl_dedup_image_tokens``) and its
    images."""
    from verl.workers.rollout.vllm_rollout.vllm_async_server import _qwen2_5_vl_dedup_image_tokens

    ids = list(out.prompt_ids) + (list(out.response_ids) if with_response else [])
    images = list(out.multi_modal_data["images"])
    return ids, {
        "prompt_token_ids": _qwen2_5_vl_dedup_image_tokens(ids, proc),
        "multi_modal_data": {"image": images if with_response else images[:1]},
    }


def test_vllm_prompt_log_probs_match_the_trainers(engine, policy, noisy_image, tiny_qwen_dir, group):  # noqa: F811
    from vllm import SamplingParams

    llm, _ = engine
    _, proc = policy
    rows, outs = _rows(policy, noisy_image)
    trainer = _log_probs(tiny_qwen_dir, proc, rows, "cuda", "flash_attention_2")
    for i, out in enumerate(outs):
        ids, prompt = _vllm_prompt(out, proc)
        (res,) = llm.generate(prompt, SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0))
        assert list(res.prompt_token_ids) == ids  # vLLM expanded the pads back to exactly the recipe's ids
        n_prompt, resp_mask = len(out.prompt_ids), torch.tensor(out.response_mask).bool()
        vllm_lp = torch.tensor(
            [res.prompt_logprobs[n_prompt + t][tok].logprob for t, tok in enumerate(out.response_ids)]
        )
        mine = trainer[i, : len(out.response_ids)]
        diff = (vllm_lp - mine)[resp_mask].abs()
        print(f"\n[vllm] row {i}: mean |diff| {float(diff.mean()):.2e}, max {float(diff.max()):.2e}")
        assert float(diff.mean()) < VLLM_MEAN_BOUND


def test_sleep_wake_reload_gives_the_same_greedy_output(engine, policy, noisy_image):  # noqa: F811
    from vllm import SamplingParams

    llm, engine_bytes = engine
    _, proc = policy
    _, outs = _rows(policy, noisy_image)
    _, prompt = _vllm_prompt(outs[0], proc, with_response=False)
    greedy = SamplingParams(max_tokens=32, temperature=0.0)
    before = list(llm.generate(prompt, greedy)[0].outputs[0].token_ids)
    free_awake = torch.cuda.mem_get_info()[0]
    llm.sleep(level=2)  # weights and KV cache discarded (verl's level for vLLM >= 0.8.5)
    freed = torch.cuda.mem_get_info()[0] - free_awake
    assert freed > 0.8 * engine_bytes, (freed, engine_bytes)
    llm.wake_up(tags=["weights"])
    llm.collective_rpc("reload_weights")  # verl loads the actor's weights here (update_weights); the same values
    llm.wake_up(tags=["kv_cache"])
    after = list(llm.generate(prompt, greedy)[0].outputs[0].token_ids)
    assert after == before and len(before) > 0
