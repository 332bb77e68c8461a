"""Image references instead of pixel values in training rows (``recipe.vsearch.image_inputs``): the rows the recipe's
agent-loop worker makes carry each image's reference and grid, a few hundred bytes instead of the processor's fp32
``pixel_values``, and the actor / reference workers rebuild exactly the pixel values verl's worker would have
computed, byte for byte (full image and crops of odd sizes)."""

from __future__ import annotations

import copy
import pickle

import pytest

from tests.support.stacks import require_recipe

require_recipe()

import numpy as np  # noqa: E402
import torch  # noqa: E402

from recipe.vsearch.image_inputs import VIEWS_KEY, PixelCache, rebuild, rebuild_pixels_in  # noqa: E402
from tests.support.recipe_loops import CROPS, expand_rows, loop_config, region_row, scripted_rollout, verl_inputs  # noqa: E402


def test_rebuilt_pixel_values_equal_the_processors_byte_for_byte(policy, noisy_image):
    _, proc = policy
    out = scripted_rollout(policy, noisy_image)
    images = out.multi_modal_data["images"]
    views = out.multi_modal_data[VIEWS_KEY]
    assert len(images) == len(views.refs) == 4  # the full image and three crops
    regions = [(r.region[2] - r.region[0], r.region[3] - r.region[1]) for r in views.refs[1:]]
    assert all(int(w) % 2 == 1 or int(h) % 2 == 1 for w, h in regions), regions  # crops of odd sizes
    want = verl_inputs(policy, out)

    batch = expand_rows(policy, out, region_row(noisy_image), loop_config(prompt_length=1024, response_length=2048))
    row = batch.non_tensor_batch["multi_modal_inputs"][0]
    assert set(row) == {"image_grid_thw", VIEWS_KEY}, "a training row carries no pixel values"
    assert torch.equal(row["image_grid_thw"], want["image_grid_thw"])
    got = rebuild(proc, row, PixelCache(2**30))
    assert set(got) == set(want)
    for key in want:
        assert got[key].dtype == want[key].dtype and got[key].shape == want[key].shape, key
        assert got[key].numpy().tobytes() == want[key].numpy().tobytes(), key
    # what travels through Ray: the row's references against verl's pixel values
    pixel_bytes = want["pixel_values"].numel() * want["pixel_values"].element_size()
    assert len(pickle.dumps(row)) * 50 < pixel_bytes


def test_policy_forward_with_references_equals_the_forward_with_pixel_values(policy, noisy_image, tiny_qwen_dir, gloo):
    """verl's ``DataParallelPPOActor`` over the rows with references (rebuilt in its micro-batches) gives exactly the
    log-probs of the same rows carrying verl's pixel values; without the rebuild it cannot run them."""
    from transformers import Qwen2_5_VLForConditionalGeneration
    from verl.workers.actor.dp_actor import DataParallelPPOActor

    from tests.support.recipe_loops import actor_config
    from verl import DataProto

    _, proc = policy
    outs = [scripted_rollout(policy, noisy_image), scripted_rollout(policy, noisy_image, CROPS[1:2])]
    cfg = loop_config(prompt_length=1024, response_length=2048)
    refs = DataProto.concat([expand_rows(policy, o, region_row(noisy_image), cfg) for o in outs])
    pixels = copy.deepcopy(refs)
    mmi = np.empty(len(outs), dtype=object)
    mmi[:] = [verl_inputs(policy, o) for o in outs]
    pixels.non_tensor_batch["multi_modal_inputs"] = mmi
    meta = {"temperature": 1.0, "micro_batch_size": 2, "use_dynamic_bsz": False}
    refs.meta_info.update(meta)
    pixels.meta_info.update(meta)
    model = Qwen2_5_VLForConditionalGeneration.from_pretrained(str(tiny_qwen_dir), torch_dtype=torch.float32).eval()
    actor = DataParallelPPOActor(actor_config(), model)
    with torch.no_grad():
        want, _ = actor.compute_log_prob(pixels, calculate_entropy=False)
        with pytest.raises(TypeError, match="ImageViews"):  # verl's torch.cat of the rows' inputs
            actor.compute_log_prob(copy.deepcopy(refs), calculate_entropy=False)
        rebuild_pixels_in(actor, proc)
        got, _ = actor.compute_log_prob(refs, calculate_entropy=False)
    assert torch.equal(got, want)


def test_rebuild_checks_the_grid_and_decodes_each_image_once_per_process(policy, noisy_image):
    _, proc = policy
    cfg = loop_config(prompt_length=1024, response_length=2048)
    rows = [
        expand_rows(
            policy, scripted_rollout(policy, noisy_image, crops), region_row(noisy_image), cfg
        ).non_tensor_batch["multi_modal_inputs"][0]
        for crops in (CROPS, CROPS[1:2])
    ]
    cache = PixelCache(2**30)
    for row in rows:
        rebuild(proc, row, cache)
    # the full image (shared by both rows) and the crop both rows made were processed once; the file decoded once
    assert (cache.stats["hits"], cache.stats["misses"]) == (2, 4)
    # logged per step by the actor worker (on_policy.update_actor): what was rebuilt since the last step
    cache.add_rebuild_time(0.25)
    assert cache.step_metrics() == {
        "vsearch/pixel_cache_hits": 2.0,
        "vsearch/pixel_cache_misses": 4.0,
        "vsearch/pixel_rebuild_s": 0.25,
    }
    rebuild(proc, rows[1], cache)
    assert cache.step_metrics() == {
        "vsearch/pixel_cache_hits": 2.0,  # its two views (the full image, its crop), both cached
        "vsearch/pixel_cache_misses": 0.0,
        "vsearch/pixel_rebuild_s": 0.0,
    }
    assert cache.store(rows[0][VIEWS_KEY].alpha).stats["decoded"] == 1
    bad = {**rows[1], "image_grid_thw": rows[1]["image_grid_thw"] + torch.tensor([[0, 2, 0]] + [[0, 0, 0]])}
    with pytest.raises(ValueError, match="noisy.png"):
        rebuild(proc, bad, cache)
    assert rebuild(proc, {"image_grid_thw": rows[0]["image_grid_thw"]}) == {"image_grid_thw": rows[0]["image_grid_thw"]}
