"""create_parquet_dataset.py -> parquet -> verl's dataset machinery (recipe dataset class) -> 1:1 batches."""
from __future__ import annotations

import asyncio
import json

import pytest

from tests.conftest import REPO, require_module

require_module("verl")

import pyarrow.parquet as pq  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from PIL import Image  # noqa: E402

from recipe.vsearch.create_parquet_dataset import InputError, build_rows, main  # noqa: E402

CONFIG_DIR = REPO / "verl" / "recipe" / "vsearch" / "config"
COLUMNS = ["data_source", "prompt", "images", "reward_model", "extra_info", "agent_name"]


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture
def data(tmp_path):
    img_dir = tmp_path / "img"
    img_dir.mkdir()
    for i in range(3):
        Image.new("RGB", (200, 100), (i * 40, 0, 0)).save(img_dir / f"r{i}.png")
    Image.new("RGB", (300, 300), "white").save(img_dir / "c0.jpg")
    region = [{"image": f"r{i % 3}.png", "width": 200, "height": 100, "description": f"the red area {i}",
               "bbox": [10, 10, 60 + i, 50], "source": "infovqa"} for i in range(6)]
    collage = [{"image": "c0.jpg", "question": f"What colour is patch {i}?", "options": ["red", "blue"],
                "answer": "A", "category": "collage", "target_bbox": [0, 0, 150, 150]} for i in range(4)]
    return tmp_path, img_dir, _jsonl(tmp_path / "region.jsonl", region), _jsonl(tmp_path / "collage.jsonl", collage)


def _pack(tmp_path, img_dir, region, collage):
    a, b = tmp_path / "out" / "region.parquet", tmp_path / "out" / "collage.parquet"
    assert main(["region", "--ann_file", str(region), "--img_dir", str(img_dir),
                 "--data_source", "info_vqa_region_localization", "--out", str(a)]) == 0
    assert main(["collage", "--ann_file", str(collage), "--img_dir", str(img_dir),
                 "--data_source", "visual_cot_vstar_collage", "--out", str(b)]) == 0
    return a, b


def test_parquet_columns_and_values(data):
    tmp_path, img_dir, region, collage = data
    a, b = _pack(tmp_path, img_dir, region, collage)
    ta, tb = pq.read_table(a), pq.read_table(b)
    assert ta.column_names == COLUMNS and tb.column_names == COLUMNS
    assert ta.schema == tb.schema  # files of different kinds concatenate in verl
    r0, c0 = ta.to_pylist()[0], tb.to_pylist()[0]
    assert r0["images"] == [{"image": f"file://{img_dir / 'r0.png'}"}]
    assert r0["agent_name"] == "vsearcher" and c0["agent_name"] == "vreasoner"
    assert r0["reward_model"] == {"ground_truth": "[10.0, 10.0, 60.0, 50.0]", "style": "rule"}
    assert c0["reward_model"] == {"ground_truth": "A", "style": "rule"}
    assert r0["extra_info"]["bboxes"] == [[10.0, 10.0, 60.0, 50.0]] and r0["extra_info"]["description"] == "the red area 0"
    assert c0["extra_info"]["bboxes"] == [[0.0, 0.0, 150.0, 150.0]]
    assert c0["extra_info"]["question"] == "What colour is patch 0?" and c0["extra_info"]["options"] == "A. red\nB. blue"
    assert r0["prompt"] == [{"role": "user", "content": "<image>\nthe red area 0"}]


def test_loads_through_verl_dataset_and_sampler_gives_1_to_1_batches(data):
    from hydra import compose, initialize_config_dir
    from torchdata.stateful_dataloader import StatefulDataLoader
    from verl.trainer.main_ppo import create_rl_dataset, create_rl_sampler
    from verl.utils.dataset.rl_dataset import collate_fn

    from recipe.vsearch.dataset import VSearchDataset
    from recipe.vsearch.sampler import WeightedSourceSampler

    tmp_path, img_dir, region, collage = data
    a, b = _pack(tmp_path, img_dir, region, collage)
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        cfg = compose(config_name="qwen_2_5_vl_7b_async", overrides=[
            f"data.train_files=[{a},{b}]", "data.train_batch_size=4", f"+data.cache_dir={tmp_path / 'cache'}",
            "+data.batch_sampler.weights.info_vqa_region_localization=0.5",
            "+data.batch_sampler.weights.visual_cot_vstar_collage=0.5"])
    ds = create_rl_dataset([str(a), str(b)], cfg.data, tokenizer=None, processor=None)
    assert isinstance(ds, VSearchDataset) and len(ds) == 10

    row = ds[0]
    system, user = row["raw_prompt"]
    assert system["role"] == "system" and "image_zoom_in_tool" in system["content"]
    assert user["content"][0] == {"type": "image", "image": f"file://{img_dir / 'r0.png'}"}
    assert user["content"][1]["text"].startswith("\nLocate the red area 0.\n")  # the fork: <image>\nLocate ...
    assert row["agent_name"] == "vsearcher" and row["image_path"] == str(img_dir / "r0.png")
    assert row["tools_kwargs"]["image_zoom_in_tool"]["create_kwargs"]["image"].startswith("file://")
    qa = ds[6]
    assert qa["agent_name"] == "vreasoner" and "<tool_feedback>" in qa["raw_prompt"][0]["content"]
    assert qa["raw_prompt"][1]["content"][0]["text"] == "What colour is patch 0?\nA. red\nB. blue"
    images, videos = asyncio.run(VSearchDataset.process_vision_info(row["raw_prompt"], 14, cfg.data))
    assert videos == [] and len(images) == 1 and images[0].size == (196, 112)  # smart_resize of 200x100

    sampler = create_rl_sampler(cfg.data, ds)
    assert isinstance(sampler, WeightedSourceSampler) and sampler.counts == {
        "info_vqa_region_localization": 2, "visual_cot_vstar_collage": 2}
    assert len(sampler) == 8  # 2 batches per epoch (collage: 4 rows / 2 per batch)

    def loader():
        s = create_rl_sampler(cfg.data, ds)
        return StatefulDataLoader(ds, batch_size=4, sampler=s, collate_fn=collate_fn, drop_last=True, num_workers=0)

    dl = loader()
    reference, sources = [], []
    for _epoch in range(2):
        for batch in dl:
            assert sorted(batch["data_source"]) == ["info_vqa_region_localization"] * 2 + ["visual_cot_vstar_collage"] * 2
            reference.append([(s, int(i)) for s, i in zip(batch["data_source"], batch["index"])])
    assert len(reference) == 4
    assert reference[:2] != reference[2:]  # a new permutation each epoch

    # exact resume: stop after 3 batches (one epoch + one), restore into a fresh loader, get batch 4
    dl2 = loader()
    assert len(list(dl2)) == 2
    it = iter(dl2)
    next(it)
    state = dl2.state_dict()
    dl3 = loader()
    dl3.load_state_dict(state)
    nxt = next(iter(dl3))
    assert [(s, int(i)) for s, i in zip(nxt["data_source"], nxt["index"])] == reference[3]


def test_sampler_errors(data):
    from recipe.vsearch.sampler import WeightedSourceSampler, split_batch

    assert split_batch(24, {"a": 0.5, "b": 0.5}) == {"a": 12, "b": 12}
    assert split_batch(5, {"a": 1, "b": 1, "c": 1}) == {"a": 2, "b": 2, "c": 1}
    with pytest.raises(ValueError, match="weights is empty"):
        split_batch(4, {})

    class Frame:
        column_names = ["data_source"]

        def __init__(self, s):
            self.s = s

        def __getitem__(self, k):
            return self.s

    class DS:
        dataframe = Frame(["a"] * 4 + ["b"] * 4)

        def __len__(self):
            return 8

    def cfg(**w):
        return OmegaConf.create({"train_batch_size": 4, "seed": 1, "batch_sampler": {"weights": w}})

    with pytest.raises(ValueError, match=r"names data_source\(s\) \['zz'\]"):
        WeightedSourceSampler(DS(), cfg(a=0.5, zz=0.5))
    with pytest.raises(ValueError, match=r"data_source \['b'\] have no weight"):
        WeightedSourceSampler(DS(), cfg(a=1.0))
    s = WeightedSourceSampler(DS(), cfg(a=0.5, b=0.5))
    assert list(s) == list(WeightedSourceSampler(DS(), cfg(a=0.5, b=0.5)))  # deterministic
    with pytest.raises(ValueError, match="saved with seed"):
        s.load_state_dict({**s.state_dict(), "seed": 2})


@pytest.mark.parametrize("patch,message", [
    ({"description": ""}, "region.jsonl:2: field 'description' is empty"),
    ({"bbox": [10, 10, 500, 50]}, "region.jsonl:2: field 'bbox' .* outside the 200x100 image"),
    ({"bbox": [60, 10, 10, 50]}, "region.jsonl:2: field 'bbox' .* inverted"),
    ({"bbox": [1, 2, "x", 4]}, "region.jsonl:2: field 'bbox' must hold 4 finite numbers"),
    ({"width": 210}, "region.jsonl:2: fields 'width'/'height' say 210x100 but .* is 200x100"),
    ({"image": "nope.png"}, "region.jsonl:2: field 'image': file not found"),
    ({"bbox": None, "_drop": "bbox"}, "region.jsonl:2: field 'bbox' is missing"),
])
def test_bad_region_input_names_file_line_field(data, patch, message):
    tmp_path, img_dir, region, _ = data
    lines = [json.loads(x) for x in region.read_text().splitlines()]
    if "_drop" in patch:
        del lines[1][patch.pop("_drop")]
        patch = {}
    lines[1].update(patch)
    _jsonl(region, lines)
    with pytest.raises(InputError, match=message):
        build_rows("region", str(region), str(img_dir), "info_vqa_region_localization")


def test_bad_qa_input_and_cli_exit_code(data, capsys):
    tmp_path, img_dir, _, collage = data
    collage.write_text(collage.read_text() + '{"image": "c0.jpg", "question": "q"}\n{not json\n')
    with pytest.raises(InputError, match=r"collage.jsonl:5: field 'answer' is missing"):
        build_rows("collage", str(collage), str(img_dir), "visual_cot_vstar_collage")
    assert main(["benchmark", "--ann_file", str(collage), "--img_dir", str(img_dir), "--data_source", "vstar",
                 "--out", str(tmp_path / "x.parquet")]) == 2
    assert "error:" in capsys.readouterr().err and not (tmp_path / "x.parquet").exists()
    with pytest.raises(InputError, match="--data_source must be"):
        build_rows("benchmark", str(collage), str(img_dir), "bad name!")
