"""The DPO trainer's defaults and DeepSpeed/accelerate configs against the release (tests/golden/insight_v_dpo.json,
recorded from dongyh20/Insight-V @5e9c6f9 by tests/golden/record_insight_v_dpo.py), and the settings' errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.support.stacks import REPO, require_module
from training.dpo.settings import DPOSettings, SettingsError

GOLDEN = json.loads((REPO / "tests" / "golden" / "insight_v_dpo.json").read_text())
SCRIPT = GOLDEN["llava_dpo_sh"]
TRAIN_DEFAULTS = GOLDEN["train_dpo_defaults"]["TrainingArguments"]
CONFIGS = REPO / "training" / "dpo" / "configs"


def test_defaults_are_the_released_script_and_trainer_defaults():
    s = DPOSettings()
    assert s.learning_rate == float(SCRIPT["learning_rate"])
    assert s.num_train_epochs == float(SCRIPT["num_train_epochs"])
    assert s.lr_scheduler_type == SCRIPT["lr_scheduler_type"]
    assert s.warmup_ratio == float(SCRIPT["warmup_ratio"])
    assert s.per_device_train_batch_size == int(SCRIPT["per_device_train_batch_size"])
    assert s.gradient_accumulation_steps == int(SCRIPT["gradient_accumulation_steps"])
    assert s.weight_decay == float(SCRIPT["weight_decay"])
    assert s.max_length == int(SCRIPT["model_max_length"])
    assert s.bf16 is (SCRIPT["bf16"] == "True")
    assert s.gradient_checkpointing is (SCRIPT["gradient_checkpointing"] == "True")
    assert (s.save_steps, s.save_total_limit, s.logging_steps) == (
        int(SCRIPT["save_steps"]),
        int(SCRIPT["save_total_limit"]),
        int(SCRIPT["logging_steps"]),
    )
    # the script sets no beta/dpo_alpha/gamma: train_dpo.py's defaults apply
    assert "beta" not in SCRIPT and "dpo_alpha" not in SCRIPT and "gamma" not in SCRIPT
    assert (s.beta, s.dpo_weight, s.sft_weight) == (
        TRAIN_DEFAULTS["beta"],
        TRAIN_DEFAULTS["dpo_alpha"],
        TRAIN_DEFAULTS["gamma"],
    )
    # mm_tunable_parts: the projector and the language model, not the vision tower
    assert set(SCRIPT["mm_tunable_parts"].split(",")) == {"mm_mlp_adapter", "mm_language_model"}
    assert s.train_vision_tower is False


def test_the_loss_is_dpo_alpha_times_sigmoid_dpo_plus_gamma_times_sft():
    assert DPOSettings().loss() == (["sigmoid", "sft"], [1.0, 1.0])
    assert DPOSettings(sft_weight=0.0).loss() == (["sigmoid"], [1.0])
    assert DPOSettings(dpo_weight=0.5, sft_weight=0.2).loss() == (["sigmoid", "sft"], [0.5, 0.2])


def test_zero3_config_holds_the_released_values():
    assert json.loads((CONFIGS / "zero3.json").read_text()) == GOLDEN["zero3_json"]
    assert SCRIPT["deepspeed"].endswith("zero3.json")


def test_accelerate_config_is_one_node_of_eight_deepspeed_processes():
    cfg = yaml.safe_load((CONFIGS / "accelerate_zero3.yaml").read_text())
    assert cfg["distributed_type"] == "DEEPSPEED" and cfg["num_processes"] == 8 and cfg["num_machines"] == 1
    assert (REPO / cfg["deepspeed_config"]["deepspeed_config_file"]) == CONFIGS / "zero3.json"


@pytest.mark.parametrize(
    "data, says",
    [
        ({"learning_rate": 0}, "learning_rate must be positive"),
        ({"lr": 1e-5}, "unknown DPO setting(s) lr"),
        ({"warmup_ratio": 1.5}, "warmup_ratio"),
        ({"dpo_weight": 0, "sft_weight": 0}, "nor both 0"),
        ({"min_pixels": 10, "max_pixels": 5}, "min_pixels"),
        ([1, 2], "expected a JSON object"),
    ],
)
def test_a_bad_settings_file_is_named_with_the_field(tmp_path, data, says):
    path = tmp_path / "dpo.json"
    path.write_text(json.dumps(data))
    with pytest.raises(SettingsError) as e:
        DPOSettings.from_file(path)
    assert str(path) in str(e.value) and says in str(e.value)


def test_settings_round_trip_through_json():
    s = DPOSettings(learning_rate=1e-3, max_steps=3, bf16=False)
    assert DPOSettings.from_json(json.loads(json.dumps(s.settings())), "x") == s


def test_the_trainer_config_deepspeed_resolves_from_the_defaults(tmp_path):
    """TRL's DPOConfig from the defaults, as DeepSpeed's "auto" values resolve it (HF's own resolution)."""
    require_module("trl")
    require_module("deepspeed")
    from transformers.integrations.deepspeed import HfTrainerDeepSpeedConfig

    from training.dpo.train import dpo_config

    cfg = dpo_config(DPOSettings(), str(tmp_path), cpu=True, eval_steps=None, deepspeed=None)
    assert (cfg.learning_rate, cfg.num_train_epochs, cfg.warmup_ratio) == (5e-6, 2.0, 0.05)
    assert getattr(cfg.lr_scheduler_type, "value", cfg.lr_scheduler_type) == "cosine" and cfg.beta == 0.1
    assert cfg.loss_type == ["sigmoid", "sft"] and cfg.loss_weights == [1.0, 1.0] and cfg.max_length == 12288
    ds = HfTrainerDeepSpeedConfig(str(CONFIGS / "zero3.json"))
    ds.trainer_config_process(cfg)
    assert ds.get_value("train_micro_batch_size_per_gpu") == 2
    assert ds.get_value("gradient_accumulation_steps") == 4
    assert ds.get_value("train_batch_size") == 2 * 4 * cfg.world_size
    assert ds.get_value("zero_optimization.stage") == 3 and ds.is_zero3()


def test_insight_o3_never_imports_the_trainer():
    """The library stays light: nothing under insight_o3/ names the training package (the import contract checks
    the modules; this checks the text too, lazy imports included)."""
    offenders = [
        str(p.relative_to(REPO))
        for p in (REPO / "insight_o3").rglob("*.py")
        if "import training" in p.read_text(encoding="utf-8") or "from training" in p.read_text(encoding="utf-8")
    ]
    assert offenders == []


def test_the_settings_module_imports_without_the_training_stack():
    import subprocess
    import sys

    code = "import sys, training.dpo.settings, training.dpo.pairs; print(sorted(m for m in ('torch','trl','transformers','datasets') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=Path(REPO), check=True)
    assert out.stdout.strip() == "[]"
