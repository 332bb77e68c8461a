"""Iterative DPO of Insight-V's reasoning agent on TRL's ``DPOTrainer`` (Qwen2.5-VL; accelerate + DeepSpeed ZeRO-3).

* :mod:`.settings` — the trainer's settings, the release's ``scripts/insight-v/llava_dpo.sh`` as defaults (torch-free);
* :mod:`.pairs` — the data engine's ``dpo_pairs.jsonl`` as the dataset TRL reads, a bad row named by file and line;
* :mod:`.train` — one DPO run (``python -m training.dpo.train``, or under ``accelerate launch``): resume from the
  last checkpoint, metrics, the exported model the next round serves;
* :mod:`.serve` — the round's policy behind ``scripts/vllm_serve_bg.sh``;
* :mod:`.rounds` — the round driver (``python -m training.dpo.rounds``): serve → generate → assess → pairs → train →
  export, round after round, under one work directory.
"""

__all__ = ["pairs", "rounds", "serve", "settings", "train"]
