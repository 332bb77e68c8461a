"""create_parquet_dataset.py -> parquet -> verl's dataset machinery (recipe dataset class) -> 1:1 batches."""

from __future__ import annotations

import asyncio
import json

import pytest

from tests.support.stacks import REPO, require_module, require_recipe

require_recipe()

import pyarrow.parquet as pq  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from PIL import Image  # noqa: E402

from insight_o3.protocol.prompts import VSEARCHER_FIRST_USER_PROMPT, fill  # noqa: E402
from recipe.vsearch.agent_loops import row_image_path  # noqa: E402
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
    region = [
        {
            "image": f"r{i % 3}.png",
            "width": 200,
            "height": 100,
            "description": f"the red area {i}",
            "bbox": [10, 10, 60 + i, 50],
            "source": "infovqa",
        }
        for i in range(6)
    ]
    collage = [
        {
            "image": "c0.jpg",
            "question": f"What colour is patch {i}?",
            "options": ["red", "blue"],
            "answer": "A",
            "category": "collage",
            "target_bbox": [0, 0, 150, 150],
        }
        for i in range(4)
    ]
    return tmp_path, img_dir, _jsonl(tmp_path / "region.jsonl", region), _jsonl(tmp_path / "collage.jsonl", collage)


def _pack(tmp_path, img_dir, region, collage):
    a, b = tmp_path / "out" / "region.parquet", tmp_path / "out" / "collage.parquet"
    assert (
        main(
            [
                "region",
                "--ann_file",
                str(region),
                "--img_dir",
                str(img_dir),
                "--data_source",
                "info_vqa_region_localization",
                "--out",
                str(a),
            ]
        )
        == 0
    )
    assert (
        main(
            [
                "collage",
                "--ann_file",
                str(collage),
                "--img_dir",
                str(img_dir),
                "--data_source",
                "visual_cot_vstar_collage",
                "--out",
                str(b),
            ]
        )
        == 0
    )
    return a, b


def _compose_two_sources(tmp_path, a, b, *extra: str):
    """The recipe's config (train.sh's weighted sampler) over the two packed files ``a``, ``b`` at equal weights."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        return compose(
            config_name="qwen_2_5_vl_7b_async",
            overrides=[
                f"data.train_files=[{a},{b}]",
                "data.train_batch_size=4",
                f"+data.cache_dir={tmp_path / 'cache'}",
                "+data.batch_sampler.weights.info_vqa_region_localization=0.5",
                "+data.batch_sampler.weights.visual_cot_vstar_collage=0.5",
                *extra,
            ],
        )


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
    assert (
        r0["extra_info"]["bboxes"] == [[10.0, 10.0, 60.0, 50.0]] and r0["extra_info"]["description"] == "the red area 0"
    )
    assert c0["extra_info"]["bboxes"] == [[0.0, 0.0, 150.0, 150.0]]
    assert (
        c0["extra_info"]["question"] == "What colour is patch 0?" and c0["extra_info"]["options"] == "A. red\nB. blue"
    )
    assert r0["prompt"] == [{"role": "user", "content": "<image>\nthe red area 0"}]


def test_loads_through_verl_dataset_and_sampler_gives_1_to_1_batches(data):
    from torchdata.stateful_dataloader import StatefulDataLoader
    from verl.trainer.main_ppo import create_rl_dataset, create_rl_sampler
    from verl.utils.dataset.rl_dataset import collate_fn

    from recipe.vsearch.dataset import VSearchDataset
    from recipe.vsearch.sampler import WeightedSourceSampler

    tmp_path, img_dir, region, collage = data
    a, b = _pack(tmp_path, img_dir, region, collage)
    cfg = _compose_two_sources(tmp_path, a, b)
    ds = create_rl_dataset([str(a), str(b)], cfg.data, tokenizer=None, processor=None)
    assert isinstance(ds, VSearchDataset) and len(ds) == 10

    row = ds[0]
    system, user = row["raw_prompt"]
    assert system["role"] == "system" and "image_zoom_in_tool" in system["content"]
    assert user["content"][0] == {"type": "image", "image": f"file://{img_dir / 'r0.png'}"}
    assert user["content"][1]["text"].startswith("\nLocate the red area 0.\n")  # the fork: <image>\nLocate ...
    # the agent loops' image path for the row: absolute, from the prompt's image part
    assert row["agent_name"] == "vsearcher" and row_image_path(row) == str(img_dir / "r0.png")
    qa = ds[6]
    assert qa["agent_name"] == "vreasoner" and "<tool_feedback>" in qa["raw_prompt"][0]["content"]
    assert qa["raw_prompt"][1]["content"][0]["text"] == "What colour is patch 0?\nA. red\nB. blue"
    images, videos = asyncio.run(VSearchDataset.process_vision_info(row["raw_prompt"], 14, cfg.data))
    assert videos == [] and len(images) == 1 and images[0].size == (196, 112)  # smart_resize of 200x100

    sampler = create_rl_sampler(cfg.data, ds)
    assert isinstance(sampler, WeightedSourceSampler) and sampler.counts == {
        "info_vqa_region_localization": 2,
        "visual_cot_vstar_collage": 2,
    }
    assert len(sampler) == 8  # 2 batches per epoch (collage: 4 rows / 2 per batch)

    def loader():
        s = create_rl_sampler(cfg.data, ds)
        return StatefulDataLoader(ds, batch_size=4, sampler=s, collate_fn=collate_fn, drop_last=True, num_workers=0)

    dl = loader()
    reference = []
    for _epoch in range(2):
        for batch in dl:
            assert (
                sorted(batch["data_source"]) == ["info_vqa_region_localization"] * 2 + ["visual_cot_vstar_collage"] * 2
            )
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


def test_each_variants_stream_resumes_exactly_and_a_resume_under_another_continues_the_saved_one(data):
    """Each ``vsearch.variant``'s data stream (``Protocol.sampler_stream`` / ``sampler_seed`` through the recipe YAML)
    resumes exactly through verl's sampler and ``StatefulDataLoader``; the saved position is refused by the other
    variant's sampler (another seed), and a run under the other variant that keeps the saved stream
    (``data.batch_sampler.stream`` / ``.seed``: ``recipe_cpu_run.run_all``'s resume under another variant, the CPU
    driver test's run 2) continues it exactly."""
    from torchdata.stateful_dataloader import StatefulDataLoader
    from verl.trainer.main_ppo import create_rl_dataset, create_rl_sampler
    from verl.utils.dataset.rl_dataset import collate_fn

    from recipe.vsearch.protocols import PROTOCOLS

    tmp_path, img_dir, region, collage = data
    a, b = _pack(tmp_path, img_dir, region, collage)

    composed: dict[tuple[str, ...], tuple] = {}

    def loader(variant: str, *extra: str) -> StatefulDataLoader:
        if (variant, *extra) not in composed:
            cfg = _compose_two_sources(tmp_path, a, b, f"vsearch.variant={variant}", *extra)
            composed[(variant, *extra)] = (cfg, create_rl_dataset([str(a), str(b)], cfg.data, None, None))
        cfg, ds = composed[(variant, *extra)]
        s = create_rl_sampler(cfg.data, ds)
        if not extra:
            assert (s.stream, s.seed) == (PROTOCOLS[variant].sampler_stream, PROTOCOLS[variant].sampler_seed)
        return StatefulDataLoader(ds, batch_size=4, sampler=s, collate_fn=collate_fn, drop_last=True, num_workers=0)

    def rows(batch) -> list[tuple[str, int]]:
        return [(s, int(i)) for s, i in zip(batch["data_source"], batch["index"])]

    reference, states = {}, {}
    for variant in PROTOCOLS:
        reference[variant] = [rows(b) for _ in range(2) for b in loader(variant)]  # two epochs of 2 batches
        dl = loader(variant)
        it = iter(dl)
        next(it)
        states[variant] = dl.state_dict()
        resumed = loader(variant)
        resumed.load_state_dict(states[variant])
        assert [rows(b) for b in resumed] == reference[variant][1:2]
    assert reference["original"] != reference["paper"]
    resumed = loader("paper")
    resumed.load_state_dict(states["original"])
    with pytest.raises(ValueError, match="saved with seed=1 .* stream=fork, but this run has seed=42 .* stream=mixed"):
        next(iter(resumed))
    # the seed alone is not enough: the offset indexes the saved stream
    resumed = loader("paper", f"data.batch_sampler.seed={PROTOCOLS['original'].sampler_seed}")
    resumed.load_state_dict(states["original"])
    with pytest.raises(ValueError, match="stream=fork, but this run has seed=1 .* stream=mixed"):
        next(iter(resumed))
    original = PROTOCOLS["original"]
    resumed = loader(
        "paper",
        f"data.batch_sampler.stream={original.sampler_stream}",
        f"data.batch_sampler.seed={original.sampler_seed}",
    )
    resumed.load_state_dict(states["original"])
    assert [rows(b) for b in resumed] == reference["original"][1:2]


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
    with pytest.raises(ValueError, match="saved with seed=2"):
        s.load_state_dict({**s.state_dict(), "seed": 2})
    with pytest.raises(ValueError, match="stream=fork, but this run has .* stream=mixed"):
        s.load_state_dict({**s.state_dict(), "stream": "fork"})
    old = {k: v for k, v in s.state_dict().items() if k != "stream"}  # saved before the stream was recorded
    s.load_state_dict({**old, "epoch": 0, "offset": 4})
    assert list(s) == list(WeightedSourceSampler(DS(), cfg(a=0.5, b=0.5)))[4:]


@pytest.mark.parametrize(
    "patch,message",
    [
        ({"description": ""}, "region.jsonl:2: field 'description' is empty"),
        ({"bbox": [10, 10, 500, 50]}, "region.jsonl:2: field 'bbox' .* outside the 200x100 image"),
        ({"bbox": [60, 10, 10, 50]}, "region.jsonl:2: field 'bbox' .* inverted"),
        ({"bbox": [1, 2, "x", 4]}, "region.jsonl:2: field 'bbox' must hold 4 finite numbers"),
        ({"width": 210}, "region.jsonl:2: fields 'width'/'height' say 210x100 but .* is 200x100"),
        ({"image": "nope.png"}, "region.jsonl:2: field 'image': file not found"),
        ({"bbox": None, "_drop": "bbox"}, "region.jsonl:2: field 'bbox' is missing"),
    ],
)
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
    assert (
        main(
            [
                "benchmark",
                "--ann_file",
                str(collage),
                "--img_dir",
                str(img_dir),
                "--data_source",
                "vstar",
                "--out",
                str(tmp_path / "x.parquet"),
            ]
        )
        == 2
    )
    assert "error:" in capsys.readouterr().err and not (tmp_path / "x.parquet").exists()
    with pytest.raises(InputError, match="--data_source must be"):
        build_rows("benchmark", str(collage), str(img_dir), "bad name!")


# ----------------------------------------------------------------------------- released Hub datasets
def _png(color, size=(120, 80), fmt="PNG") -> bytes:
    import io

    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, format=fmt)
    return buf.getvalue()


def _hub_copy(root, columns: dict, features: dict, n_shards: int = 2, layout: str = "data/train-{i:05d}-of-{n:05d}"):
    """A local copy of a Hub dataset repo as ``datasets`` writes it: Parquet shards of the train split whose
    ``image`` column is the ``Image`` feature (packed bytes), plus a dataset card."""
    datasets = require_module("datasets")
    ds = datasets.Dataset.from_dict(columns, features=datasets.Features(features))
    for i in range(n_shards):
        path = root / (layout.format(i=i, n=n_shards) + ".parquet")
        path.parent.mkdir(parents=True, exist_ok=True)
        ds.shard(n_shards, i, contiguous=True).to_parquet(str(path))
    (root / "README.md").write_text(
        "---\nconfigs:\n- config_name: default\n  data_files:\n  - split: train\n    path: data/train-*\n---\n"
    )
    return root


def _infovqa(root, bbox1=(10, 10, 60, 40), qid2="im7_1"):
    datasets = require_module("datasets")
    imgs = {"im3": _png((200, 0, 0)), "im7": _png((0, 0, 200), (90, 60), "JPEG")}
    qids = ["im3_0", "im3_1", "im7_0", qid2, "im3_2"]
    cols = {
        "image": [{"bytes": imgs[q.split("_")[0]], "path": None} for q in qids],
        "question_id": qids,
        "region_description": [f"the region {q}" for q in qids],
        "bbox": [[0, 0, 50, 50], list(bbox1), [5, 5, 80, 50], [1, 2, 30, 40], [70, 30, 110, 70]],
    }
    feats = {
        "image": datasets.Image(),
        "question_id": datasets.Value("string"),
        "region_description": datasets.Value("string"),
        "bbox": datasets.Sequence(datasets.Value("int64")),
    }
    return _hub_copy(root, cols, feats), imgs


def _collage(root, target=(100, 100, 130, 120), layout="data/train-{i:05d}-of-{n:05d}"):
    datasets = require_module("datasets")
    n = 4
    cols = {
        "image": [{"bytes": _png((i * 50, 90, 90), (400, 300), "JPEG"), "path": None} for i in range(n)],
        "question": [f"In tile #{i}, what is written on the sign?" for i in range(n)],
        "answer": [f"word{i}" for i in range(n)],
        "qa_pairs": [json.dumps([{"q": "x", "a": "y"}])] * n,
        "n_layouts": [5] * n,
        "layout_types": [["core", "fill"]] * n,
        "core_layout_coord": [[0, 0, 200, 150]] * n,
        "core_target_bbox": [list(target)] + [[10, 10, 40, 40]] * (n - 1),
    }
    feats = {
        "image": datasets.Image(),
        "question": datasets.Value("string"),
        "answer": datasets.Value("string"),
        "qa_pairs": datasets.Value("string"),
        "n_layouts": datasets.Value("int32"),
        "layout_types": datasets.Sequence(datasets.Value("string")),
        "core_layout_coord": datasets.Sequence(datasets.Value("int32")),
        "core_target_bbox": datasets.Sequence(datasets.Value("float32")),
    }
    return _hub_copy(root, cols, feats, layout=layout)


def test_released_datasets_pack_in_their_published_layout(tmp_path):
    from verl.trainer.main_ppo import create_rl_dataset, create_rl_sampler

    from recipe.vsearch.dataset import VSearchDataset

    info_root, imgs = _infovqa(tmp_path / "InfoVQA_RegionLocalization")
    coll_root = _collage(tmp_path / "VisCoT_VStar_Collage")
    a, b = tmp_path / "info.parquet", tmp_path / "coll.parquet"
    assert main(["infovqa_region_localization", "--data_root", str(info_root), "--out", str(a)]) == 0
    assert main(["viscot_vstar_collage", "--data_root", str(coll_root), "--out", str(b)]) == 0
    ta, tb = pq.read_table(a), pq.read_table(b)
    assert ta.column_names == COLUMNS and ta.schema == tb.schema
    ra, rb = ta.to_pylist(), tb.to_pylist()
    assert len(ra) == 5 and len(rb) == 4
    # default data sources: the names train.sh weighs 1:1
    assert {r["data_source"] for r in ra} == {"info_vqa_region_localization"}
    assert {r["data_source"] for r in rb} == {"visual_cot_vstar_collage"}
    # one image file per InfographicVQA image, the packed bytes as they are (no re-encode), across shards
    img_dir = info_root / "train" / "images"
    assert sorted(p.name for p in img_dir.iterdir()) == ["im3.png", "im7.jpg"]
    assert (img_dir / "im3.png").read_bytes() == imgs["im3"] and (img_dir / "im7.jpg").read_bytes() == imgs["im7"]
    r1 = ra[1]
    assert r1["agent_name"] == "vsearcher" and r1["images"] == [{"image": f"file://{img_dir / 'im3.png'}"}]
    assert r1["extra_info"]["description"] == "the region im3_1" and r1["extra_info"]["question_id"] == "im3_1"
    assert (
        r1["extra_info"]["bboxes"] == [[10.0, 10.0, 60.0, 40.0]]
        and r1["reward_model"]["ground_truth"] == "[10.0, 10.0, 60.0, 40.0]"
    )
    assert (r1["extra_info"]["width"], r1["extra_info"]["height"]) == (120, 80)
    assert ra[4]["extra_info"]["index"] == 4 and ra[4]["images"] == ra[0]["images"]
    c0 = rb[0]
    assert c0["agent_name"] == "vreasoner" and c0["reward_model"] == {"ground_truth": "word0", "style": "rule"}
    assert c0["extra_info"]["question"] == "In tile #0, what is written on the sign?"
    assert c0["extra_info"]["bboxes"] == [[100.0, 100.0, 130.0, 120.0]]
    assert c0["images"] == [{"image": f"file://{coll_root / 'train' / 'images' / '0.jpg'}"}]
    # both files load through verl's dataset (recipe class) and the weighted sampler of train.sh
    cfg = _compose_two_sources(tmp_path, a, b)
    ds = create_rl_dataset([str(a), str(b)], cfg.data, tokenizer=None, processor=None)
    assert isinstance(ds, VSearchDataset) and len(ds) == 9
    assert ds[0]["raw_prompt"][1]["content"][1]["text"] == fill(VSEARCHER_FIRST_USER_PROMPT, target="the region im3_0")
    assert ds[5]["raw_prompt"][1]["content"][0]["text"] == "In tile #0, what is written on the sign?"
    assert create_rl_sampler(cfg.data, ds).counts == {"info_vqa_region_localization": 2, "visual_cot_vstar_collage": 2}


def test_released_pack_resumes_and_finds_other_shard_layouts(tmp_path):
    coll_root = _collage(tmp_path / "c", layout="train/part-{i}")  # <split>/*.parquet
    out = tmp_path / "c.parquet"
    assert (
        main(
            [
                "viscot_vstar_collage",
                "--data_root",
                str(coll_root),
                "--out",
                str(out),
                "--image_dir",
                str(tmp_path / "imgs"),
                "--data_source",
                "my_collage",
            ]
        )
        == 0
    )
    first = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "imgs").iterdir()}
    assert sorted(first) == ["0.jpg", "1.jpg", "2.jpg", "3.jpg"]
    (tmp_path / "imgs" / "2.jpg").write_bytes(b"torn")  # an interrupted earlier run
    assert (
        main(
            [
                "viscot_vstar_collage",
                "--data_root",
                str(coll_root),
                "--out",
                str(out),
                "--image_dir",
                str(tmp_path / "imgs"),
                "--data_source",
                "my_collage",
            ]
        )
        == 0
    )
    again = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "imgs").iterdir()}
    assert {k: v for k, v in again.items() if k != "2.jpg"} == {k: v for k, v in first.items() if k != "2.jpg"}
    Image.open(tmp_path / "imgs" / "2.jpg").verify()  # rewritten whole
    assert {r["data_source"] for r in pq.read_table(out).to_pylist()} == {"my_collage"}


@pytest.mark.parametrize(
    "kind,make,message",
    [
        (
            "infovqa_region_localization",
            lambda r: _infovqa(r, bbox1=(10, 10, 130, 40))[0],
            r"train-00000-of-00002.parquet:row 1: field 'bbox' .* outside the 120x80",
        ),
        (
            "infovqa_region_localization",
            lambda r: _infovqa(r, qid2="im7")[0],
            r"train-00001-of-00002.parquet:row 0: field 'question_id' must be",
        ),
        (
            "viscot_vstar_collage",
            lambda r: _collage(r, target=(100, 100, 90, 120)),
            r"train-00000-of-00002.parquet:row 0: field 'core_target_bbox' .* inverted",
        ),
    ],
)
def test_bad_released_rows_name_shard_row_field(tmp_path, kind, make, message):
    root = make(tmp_path / "d")
    assert main([kind, "--data_root", str(root), "--out", str(tmp_path / "x.parquet")]) == 2
    from recipe.vsearch.create_parquet_dataset import released_rows

    with pytest.raises(InputError, match=message):
        released_rows(kind, str(root), "x")
    assert not (tmp_path / "x.parquet").exists()


def test_released_layout_errors(tmp_path):
    from recipe.vsearch.create_parquet_dataset import released_rows

    with pytest.raises(InputError, match="no Parquet shards of split 'train'"):
        released_rows("viscot_vstar_collage", str(tmp_path), "x")
    root = _infovqa(tmp_path / "info")[0]
    with pytest.raises(InputError, match=r"field 'question' is missing .* is this VisCoT_VStar_Collage"):
        released_rows("viscot_vstar_collage", str(root), "x")
