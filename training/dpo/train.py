"""One DPO run of the reasoning agent on TRL's ``DPOTrainer`` (vision-language preference data, Qwen2.5-VL).

::

    python -m training.dpo.train --model M --pairs dpo_pairs.jsonl --output_dir OUT --export_dir MODEL
    accelerate launch --config_file training/dpo/configs/accelerate_zero3.yaml -m training.dpo.train ...

``OUT`` holds the trainer's checkpoints (``checkpoint-<step>``, every ``save_steps``) and ``metrics.jsonl`` (one line
per log: loss, ``rewards/chosen``, ``rewards/rejected``, ``rewards/margins``, ``rewards/accuracies``, the eval ones
when ``--eval_pairs`` is given). A run that finds a complete checkpoint in ``OUT`` resumes from it
(``resume_from_checkpoint``, as the release's ``train_dpo.py`` does); a checkpoint a kill left half-written (no
``trainer_state.json``, which the trainer writes last) is removed first. At the end the model is exported to
``MODEL`` (written beside it and renamed into place, so ``MODEL`` exists only complete): the weights, the source
model's processor and tokenizer files (DPO does not change them), ``config.json`` with its top-level
``architectures`` (vLLM reads it), and ``dpo_export.json`` (the step count, the last metrics).

Exit status: 0 done, 2 bad input (pairs, settings; the message names file, line and field).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
from pathlib import Path
from typing import Any

from insight_o3.base.exit_codes import ExitCode
from insight_o3.storage.atomic import write_json_atomic, write_jsonl_atomic

from .pairs import PairsError, load_dataset
from .settings import DPOSettings, SettingsError

ROOT = Path(__file__).resolve().parents[2]
METRICS_FILE = "metrics.jsonl"
EXPORT_CARD = "dpo_export.json"
#: a checkpoint is complete once the trainer has written this (its last file)
TRAINER_STATE = "trainer_state.json"
#: files of the exported checkpoint that the trainer writes; every other file of the source model is copied
WEIGHT_FILES = re.compile(
    r"^(config\.json|generation_config\.json|model.*\.safetensors(\.index\.json)?|pytorch_model.*)$"
)
_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")


def checkpoints(output_dir: str | os.PathLike) -> list[tuple[int, Path, bool]]:
    """``(step, path, complete)`` of every ``checkpoint-<step>`` in ``output_dir``, by step."""
    out = []
    root = Path(output_dir)
    if root.is_dir():
        for p in root.iterdir():
            m = _CHECKPOINT.match(p.name)
            if m and p.is_dir():
                out.append((int(m.group(1)), p, (p / TRAINER_STATE).is_file()))
    return sorted(out)


def resume_point(output_dir: str | os.PathLike, *, remove_incomplete: bool) -> str | None:
    """The last complete checkpoint (None: start from the model); incomplete ones are removed when asked (the main
    process does, before any rank reads the directory)."""
    last = None
    for _, path, complete in checkpoints(output_dir):
        if complete:
            last = str(path)
        elif remove_incomplete:
            shutil.rmtree(path, ignore_errors=True)
    return last


def checkpoint_step(path: str | None) -> int:
    m = _CHECKPOINT.match(Path(path).name) if path else None
    return int(m.group(1)) if m else 0


def trim_metrics(path: Path, step: int) -> None:
    """Keep the metric lines up to ``step`` (where training resumes): the steps after it are trained, and logged,
    again."""
    if not path.exists():
        return
    keep = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:  # a line torn by the kill
            continue
        if isinstance(row, dict) and isinstance(row.get("step"), int) and row["step"] <= step:
            keep.append(row)
    write_jsonl_atomic(path, keep)


def build_processor(model_dir: str, s: DPOSettings) -> Any:
    """The model's processor with the settings' image budget. Where transformers cannot build Qwen2.5-VL's video
    processor (no torchvision: the CPU test stack), the image-only one of the verl recipe's CPU support."""
    from transformers import AutoProcessor

    try:
        processor = AutoProcessor.from_pretrained(model_dir)
    except ImportError as e:
        if "torchvision" not in str(e).lower():
            raise
        recipe_root = str(ROOT / "verl")
        if recipe_root not in sys.path:
            sys.path.append(recipe_root)
        from recipe.vsearch.cpu.processor import image_only_processor

        processor = image_only_processor(model_dir)
    ip = processor.image_processor
    ip.min_pixels, ip.max_pixels = s.min_pixels, s.max_pixels
    if isinstance(getattr(ip, "size", None), dict):
        ip.size = {"shortest_edge": s.min_pixels, "longest_edge": s.max_pixels}
    return processor


def load_model(model_dir: str, s: DPOSettings) -> Any:
    """The policy (bf16 or fp32), its vision blocks frozen unless ``train_vision_tower`` (the merger — Qwen2.5-VL's
    projector — and the language model train, as the release's ``mm_mlp_adapter,mm_language_model``)."""
    import torch
    from transformers import AutoModelForImageTextToText

    model = AutoModelForImageTextToText.from_pretrained(model_dir, dtype=torch.bfloat16 if s.bf16 else torch.float32)
    if not s.train_vision_tower:
        visual = getattr(getattr(model, "model", model), "visual", None) or getattr(model, "visual", None)
        if visual is None:
            raise SettingsError(f"{model_dir}: no vision tower found to freeze (is it a Qwen2.5-VL checkpoint?)")
        for name, p in visual.named_parameters():
            p.requires_grad_(name.startswith("merger."))
    return model


def dpo_config(s: DPOSettings, output_dir: str, *, cpu: bool, eval_steps: int | None, deepspeed: str | None) -> Any:
    from trl import DPOConfig

    loss_type, loss_weights = s.loss()
    return DPOConfig(
        output_dir=output_dir,
        learning_rate=s.learning_rate,
        num_train_epochs=s.num_train_epochs,
        max_steps=s.max_steps,
        lr_scheduler_type=s.lr_scheduler_type,
        warmup_ratio=s.warmup_ratio,
        per_device_train_batch_size=s.per_device_train_batch_size,
        per_device_eval_batch_size=4,  # the release's
        gradient_accumulation_steps=s.gradient_accumulation_steps,
        weight_decay=s.weight_decay,
        beta=s.beta,
        loss_type=loss_type,
        loss_weights=loss_weights,
        max_length=s.max_length,
        truncation_mode="keep_start",
        bf16=s.bf16 and not cpu,
        tf32=True if not cpu else None,  # the release's --tf32 True (Ampere and later)
        gradient_checkpointing=s.gradient_checkpointing,
        save_strategy="steps",
        save_steps=s.save_steps,
        save_total_limit=s.save_total_limit,
        logging_steps=s.logging_steps,
        eval_strategy="steps" if eval_steps else "no",
        eval_steps=eval_steps,
        seed=s.seed,
        data_seed=s.seed,
        report_to=[],
        use_cpu=cpu,
        dataloader_num_workers=0 if cpu else 4,
        remove_unused_columns=False,
        deepspeed=deepspeed,
        save_only_model=False,
    )


def _metrics_callback(path: Path) -> Any:
    from transformers import TrainerCallback

    class MetricsFile(TrainerCallback):
        """Appends every log (with its step) to ``metrics.jsonl`` on the main process."""

        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kw: Any) -> None:
            if state.is_world_process_zero and logs:
                with open(path, "a", encoding="utf-8") as f:
                    f.write(json.dumps({"step": state.global_step, **logs}, sort_keys=True) + "\n")
                    f.flush()
                    os.fsync(f.fileno())

    return MetricsFile()


def export(trainer: Any, model_dir: str, export_dir: str) -> None:
    """The trained policy as a servable checkpoint at ``export_dir`` (see the module docstring)."""
    final = Path(export_dir)
    tmp = final.with_name(final.name + ".partial")
    if trainer.accelerator.is_main_process and tmp.exists():
        shutil.rmtree(tmp)
    trainer.accelerator.wait_for_everyone()
    trainer.save_model(
        str(tmp)
    )  # every rank: ZeRO-3 gathers the 16-bit weights (stage3_gather_16bit_weights_on_model_save)
    if not trainer.accelerator.is_main_process:
        return
    for src in Path(model_dir).iterdir():
        if src.is_file() and not WEIGHT_FILES.match(src.name):
            shutil.copy2(src, tmp / src.name)
    cfg_path = tmp / "config.json"
    cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
    if not cfg.get("architectures"):
        cfg["architectures"] = [type(trainer.accelerator.unwrap_model(trainer.model)).__name__]
        cfg_path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    logs = [h for h in trainer.state.log_history if "loss" in h]
    write_json_atomic(
        tmp / EXPORT_CARD,
        {
            "source_model": os.path.abspath(model_dir),
            "global_step": trainer.state.global_step,
            "last_log": logs[-1] if logs else None,
        },
    )
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m training.dpo.train", description=__doc__.split("\n\n")[0], allow_abbrev=False
    )
    p.add_argument("--model", required=True, help="the policy to train (a Qwen2.5-VL checkpoint directory)")
    p.add_argument("--pairs", required=True, help="dpo_pairs.jsonl of the data engine's export")
    p.add_argument("--output_dir", required=True, help="checkpoints and metrics.jsonl")
    p.add_argument("--export_dir", required=True, help="where the trained model is exported")
    p.add_argument(
        "--settings", help="JSON file of DPO settings (training.dpo.settings.DPOSettings); default: the release's"
    )
    p.add_argument("--eval_pairs", help="a fixed set of pairs evaluated every --eval_steps (eval_loss, eval_rewards/*)")
    p.add_argument("--eval_steps", type=int, default=1)
    p.add_argument(
        "--deepspeed", help="a DeepSpeed config for TrainingArguments (torchrun); accelerate's config sets it otherwise"
    )
    p.add_argument("--cpu", action="store_true", help="train on the CPU (fp32; tests)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        s = DPOSettings.from_file(args.settings) if args.settings else DPOSettings()
        train_set = load_dataset(args.pairs)
        eval_set = load_dataset(args.eval_pairs) if args.eval_pairs else None
    except (SettingsError, PairsError) as e:
        print(f"error: {e}", file=sys.stderr)
        return int(ExitCode.BAD_INPUT)
    from trl import DPOTrainer

    os.makedirs(args.output_dir, exist_ok=True)
    config = dpo_config(
        s,
        args.output_dir,
        cpu=args.cpu,
        eval_steps=args.eval_steps if eval_set is not None else None,
        deepspeed=args.deepspeed,
    )
    # Resuming: the policy is loaded from the checkpoint by ``from_pretrained``, because the Trainer's own weight load
    # (``load_state_dict(strict=False)`` of the saved file) does not map the key names Qwen2.5-VL is saved under in
    # transformers 4.57 and silently keeps the starting weights (its log lists every key as missing); under DeepSpeed
    # the engine then loads its own shards over it. The reference model is always the run's starting policy (TRL
    # would otherwise build it from the policy's path: the checkpoint).
    main_process = int(os.environ.get("RANK", "0")) == 0
    resume = resume_point(args.output_dir, remove_incomplete=main_process)
    if resume:
        print(f"[dpo train] resuming from {resume}", file=sys.stderr, flush=True)
    trainer = DPOTrainer(
        model=load_model(resume or args.model, s),
        ref_model=load_model(args.model, s),
        args=config,
        train_dataset=train_set,
        eval_dataset=eval_set,
        processing_class=build_processor(args.model, s),
        callbacks=[_metrics_callback(Path(args.output_dir) / METRICS_FILE)],
    )
    if trainer.accelerator.is_main_process:
        trim_metrics(Path(args.output_dir) / METRICS_FILE, checkpoint_step(resume))
    trainer.accelerator.wait_for_everyone()
    trainer.train(resume_from_checkpoint=resume)
    export(trainer, args.model, args.export_dir)
    return int(ExitCode.OK)


if __name__ == "__main__":
    raise SystemExit(main())
