"""Start-up checks of what every node needs, run in the driver before Ray starts and then on every alive node.

A worker that dies at model init (no ``flash_attn``) or at import (no harmony vocab) surfaces as a Ray traceback
minutes into the run, on one node. Each check here is one function returning ``None`` (fine) or one line naming the
fix; :func:`check_driver` runs them in the driver (``main.py``, before ``ray.init``: status 2), and
:func:`check_every_node` runs them in a tiny task pinned to each alive node after ``ray.init`` (the API-key check
of ``main.check_worker_secrets`` goes the same way).

flash-attn: verl 0.7.0 loads the actor and the reference with ``attn_implementation`` from
``actor_rollout_ref.model.override_config`` (default ``flash_attention_2``, ``verl/workers/fsdp_workers.py:329``)
and its remove-padding path imports ``flash_attn`` (``verl/models/transformers/qwen2_vl.py:45-46``); the ``train``
extra cannot install it (it is built against the installed torch). The switch without it is
:data:`SDPA_OVERRIDES`.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from typing import Any

from .padding import PADDED_PATH_OVERRIDES

#: the overrides that train without flash-attn (PyTorch's SDPA attention, no remove-padding; slower, more memory):
#: the padded path, whose log-prob passes run one row per micro-batch (recipe.vsearch.padding)
SDPA_OVERRIDES = (
    "+actor_rollout_ref.model.override_config.attn_implementation=sdpa",
    "actor_rollout_ref.model.use_remove_padding=False",
    *PADDED_PATH_OVERRIDES,
)
FLASH_ATTN_FIX = (
    "install flash-attn built for this torch (recipe/vsearch/README.md, 'flash-attn'), or train without it: "
    + " ".join(SDPA_OVERRIDES)
)


def _get(config: Any, path: str, default: Any = None) -> Any:
    node = config
    for key in path.split("."):
        if node is None or not hasattr(node, "get"):
            return default
        node = node.get(key, None)
    return default if node is None else node


def needs_flash_attn(config: Any) -> bool:
    """Whether verl will import ``flash_attn`` for this config (attention ``flash_attention_2`` or remove-padding)."""
    attn = _get(config, "actor_rollout_ref.model.override_config.attn_implementation", "flash_attention_2")
    return str(attn) == "flash_attention_2" or bool(_get(config, "actor_rollout_ref.model.use_remove_padding", False))


def flash_attn_problem(needed: bool, load: bool = False) -> str | None:
    """One line when flash-attn is needed but missing (``load``: import it, as a worker will; else only find it)."""
    if not needed:
        return None
    if importlib.util.find_spec("flash_attn") is None:
        return f"flash_attn is not installed but the config needs it (flash_attention_2 / remove-padding): {FLASH_ATTN_FIX}"
    if load:
        try:
            importlib.import_module("flash_attn")
        except Exception as e:  # a wheel built for another torch/CUDA fails here, not at find_spec
            return f"flash_attn does not import ({type(e).__name__}: {str(e)[:200]}): {FLASH_ATTN_FIX}"
    return None


def harmony_problem(rollout_name: str) -> str | None:
    """The offline harmony-vocab check (:func:`recipe.vsearch.offline.check_harmony_vocab`) as one line."""
    from recipe.vsearch.offline import OfflineStartupError, check_harmony_vocab

    try:
        check_harmony_vocab(rollout_name)
    except OfflineStartupError as e:
        return str(e)
    return None


def node_problems(needs_fa: bool, rollout_name: str) -> list[str]:
    """What this process's node lacks (run on every node by :func:`check_every_node`)."""
    return [p for p in (flash_attn_problem(needs_fa, load=True), harmony_problem(rollout_name)) if p]


def check_every_node(probe: Callable[..., Any], *args: Any, timeout: float = 300) -> list[tuple[str, Any]]:
    """``probe(*args)`` in a task pinned to every alive node: ``[(node address, result)]``."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    remote = ray.remote(num_cpus=0)(probe)
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    refs = [
        remote.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)).remote(*args)
        for n in nodes
    ]
    return [(str(n.get("NodeManagerAddress")), r) for n, r in zip(nodes, ray.get(refs, timeout=timeout))]


def check_nodes(config: Any, timeout: float = 300) -> None:
    """:func:`node_problems` on every alive node; stops the run naming each node and its problem."""
    needs_fa, rollout = needs_flash_attn(config), str(_get(config, "actor_rollout_ref.rollout.name", "vllm"))
    bad = [
        f"{addr}: {p}"
        for addr, problems in check_every_node(node_problems, needs_fa, rollout, timeout=timeout)
        for p in problems
    ]
    if bad:
        raise SystemExit("[vsearch] error: on these nodes: " + " | ".join(bad))


def check_driver(config: Any) -> list[str]:
    """The checks of :func:`node_problems` in the driver (flash-attn found, not imported: the driver may be a
    node without a GPU). Returns the problems; ``main.py`` prints them and exits with status 2 before Ray."""
    return [p for p in (flash_attn_problem(needs_flash_attn(config)),) if p]
