"""Which checkpoint a run will resume from, and whether this run can load it (checked before Ray starts).

verl's FSDP checkpoints are sharded per rank and named by the world size that wrote them
(``actor/model_world_size_<W>_rank_<r>.pt``); a run with another number of GPUs (``val.sh`` auto-resumes the
latest checkpoint of the experiment, often on a different allocation than training had) fails deep inside a
worker with a missing-file error. :func:`check_resume` stops it at start-up with the two ways out.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from .settings import SettingsError, select

SHARD = re.compile(r"model_world_size_(\d+)_rank_\d+\.pt$")


def resume_folder(config: Any) -> Path | None:
    """The ``global_step_*`` folder verl 0.7's ``_load_checkpoint`` will load, or None (fresh start)."""
    mode = select(config, "trainer.resume_mode", "auto")
    if mode == "disable":
        return None
    if mode == "resume_path":
        path = select(config, "trainer.resume_from_path")
        return Path(path) if path else None
    root = select(config, "trainer.default_local_dir")
    if not root:
        return None
    tracker = Path(root) / "latest_checkpointed_iteration.txt"
    if not tracker.is_file():
        return None
    step = tracker.read_text().strip()
    folder = Path(root) / f"global_step_{step}"
    return folder if folder.is_dir() else None


def checkpoint_world_size(folder: Path) -> int | None:
    """World size of the actor shards in ``folder`` (None when it has none)."""
    sizes = {
        int(m.group(1)) for p in (folder / "actor").glob("model_world_size_*_rank_*.pt") if (m := SHARD.search(p.name))
    }
    if len(sizes) > 1:
        raise SettingsError(
            f"{folder}/actor holds shards of several world sizes {sorted(sizes)}; remove the stale ones"
        )
    return sizes.pop() if sizes else None


def check_resume(config: Any) -> str:
    """Raise :class:`SettingsError` when the checkpoint to resume was written by another number of GPUs than
    ``trainer.nnodes`` x ``trainer.n_gpus_per_node``. Returns a one-line status for the start-up log."""
    folder = resume_folder(config)
    if folder is None:
        return "resume: none (fresh start)"
    saved = checkpoint_world_size(folder)
    world = int(select(config, "trainer.nnodes", 1)) * int(select(config, "trainer.n_gpus_per_node", 1))
    if saved is not None and saved != world:
        raise SettingsError(
            f"the checkpoint to resume, {folder}, was written by {saved} GPU ranks (actor/model_world_size_{saved}_"
            f"rank_*.pt) but this run has {world} (trainer.nnodes x trainer.n_gpus_per_node = NNODES x "
            f"N_GPUS_PER_NODE); verl loads FSDP shards only at the world size that wrote them. Either run with "
            f"{saved} GPUs, or export the checkpoint to Hugging Face weights and evaluate those without resuming: "
            f"`bash recipe/vsearch/export_hf.sh {folder} <hf_dir>` then `MODEL_PATH=<hf_dir> bash recipe/vsearch/val.sh "
            "trainer.resume_mode=disable`"
        )
    return f"resume: {folder} ({saved} ranks)"
