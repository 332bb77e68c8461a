"""``actor_rollout_ref.rollout.name=hf_cpu``: a HuggingFace-``generate`` rollout replica for CPU runs.

It takes vLLM's place in verl 0.7.0's *hybrid* rollout mode and keeps vLLM's architecture:

* :class:`HFCPUReplica` (verl's ``RolloutReplicaRegistry``) is what ``AgentLoopManager`` builds, one per
  rollout world (``tensor_model_parallel_size`` = 1 here, so one per FSDP rank). It launches one
  :class:`HFCPUServer` Ray actor whose handle the agent loops' ``AsyncLLMServerManager`` calls
  (``generate(prompt_ids, sampling_params, request_id, image_data)`` -> ``TokenOutput``).
* :class:`HFCPURollout` (verl's worker-side ``_ROLLOUT_REGISTRY``) is the ``BaseRollout`` that the
  FSDP worker builds in ``_build_rollout``. On ``wake_up`` the server calls the workers' own
  ``wake_up`` (verl's ``rollout_mode``), which hands it the actor's full weights; the rollout forwards
  them to its server (``update_weights``), exactly where vLLM's rollout would push them over ZMQ.

The server runs generation in its own process because verl's FSDP worker monkey-patches the
Qwen2.5-VL forward (no KV cache, explicit mrope positions), which HuggingFace ``generate`` cannot use.
Sampling follows vLLM's defaults in verl's ``vLLMHttpServer.generate``: ``max_tokens`` from the
request, else ``prompt_length + response_length - len(prompt)``, capped by the model's context;
greedy at temperature 0; log-probs (``logprobs=True``) are those of the processed distribution, like
verl's default ``logprobs_mode=processed_logprobs``. Prompts carry the expanded image-pad tokens
(verl's ``apply_chat_template`` with the processor); their number must match the images' grids.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from typing import Any

import ray
import torch
from verl.utils.config import omega_conf_to_dataclass
from verl.workers.config import HFModelConfig, RolloutConfig
from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.replica import RolloutMode, RolloutReplica, TokenOutput


def server_name(replica_rank: int) -> str:
    return f"vsearch_hf_cpu_server_{replica_rank}"


def _rollout_world_size(config) -> int:
    return (
        int(config.tensor_model_parallel_size)
        * int(config.data_parallel_size)
        * int(config.pipeline_model_parallel_size)
    )


def to_module_keys(model: torch.nn.Module, names: list[str]) -> list[str]:
    """Checkpoint-format names (what verl's ``convert_weight_keys`` hands a rollout, e.g. ``visual.*``,
    ``model.layers.*``) -> this transformers version's module names, with the model's own
    ``_checkpoint_conversion_mapping`` (the mapping ``from_pretrained`` applies)."""
    mapping = getattr(model, "_checkpoint_conversion_mapping", None) or {}
    out = []
    for name in names:
        for pattern, replacement in mapping.items():
            name, n = re.subn(pattern, replacement, name)
            if n:
                break
        out.append(name)
    return out


def weights_digest(named_tensors: list[tuple[str, torch.Tensor]]) -> str:
    """sha256 (first 16 hex digits) of the names and bytes of a list of tensors, in name order."""
    h = hashlib.sha256()
    for name, tensor in sorted(named_tensors, key=lambda x: x[0]):
        h.update(name.encode())
        h.update(tensor.detach().contiguous().cpu().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()[:16]


class HFCPUServer:
    """One replica's generation server (a Ray actor; see the module doc)."""

    def __init__(self, config, model_config, rollout_mode: RolloutMode, workers: list, replica_rank: int):
        from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

        self.config: RolloutConfig = omega_conf_to_dataclass(config)
        self.model_config: HFModelConfig = omega_conf_to_dataclass(model_config, dataclass_type=HFModelConfig)
        self.rollout_mode, self.workers, self.replica_rank = rollout_mode, list(workers), replica_rank
        path = self.model_config.local_path
        auto = (
            AutoModelForImageTextToText
            if hasattr(self.model_config.hf_config, "vision_config")
            else AutoModelForCausalLM
        )
        # float32 on CPU (bf16 matmuls are emulated on most CPUs); eager attention (no flash-attn here)
        self.model = auto.from_pretrained(path, torch_dtype=torch.float32, attn_implementation="eager").eval()
        self.processor = self.model_config.processor
        self.tokenizer = self.model_config.tokenizer
        gen_eos = self.model.generation_config.eos_token_id
        eos = gen_eos if isinstance(gen_eos, list) else [gen_eos]
        self.eos_token_ids = sorted({int(i) for i in [*eos, self.tokenizer.eos_token_id] if i is not None})
        pad = self.tokenizer.pad_token_id
        self.pad_token_id = int(pad if pad is not None else self.eos_token_ids[0])
        self.max_model_len = int(
            self.config.max_model_len
            or getattr(self.model.config, "text_config", self.model.config).max_position_embeddings
        )
        self._lock = asyncio.Lock()
        self.weight_syncs = 0
        torch.manual_seed(1000 + replica_rank)

    def ready(self) -> bool:
        return True

    # ------------------------------------------------------------------ weights (hybrid mode)
    async def update_weights(self, named_tensors: list[tuple[str, torch.Tensor]]) -> int:
        """Load the actor's full weights (checkpoint-format names). Every parameter must be covered."""
        async with self._lock:
            names = to_module_keys(self.model, [n for n, _ in named_tensors])
            state = self.model.state_dict()
            unknown = [n for n in names if n not in state]
            if unknown:
                raise KeyError(f"hf_cpu rollout: weights {unknown[:5]} do not exist in {type(self.model).__name__}")
            loaded = set()
            with torch.no_grad():
                for name, (_, tensor) in zip(names, named_tensors):
                    state[name].copy_(tensor.to(state[name].dtype))
                    loaded.add(name)
            params = {n for n, _ in self.model.named_parameters()}
            missing = sorted(params - loaded)
            if missing:
                raise KeyError(f"hf_cpu rollout: the actor sent no weights for {missing[:5]}")
            self.weight_syncs += 1
            # one line per sync, forwarded by Ray to the driver's log: the digest shows which weights the
            # rollout uses (it changes after each actor update and survives checkpoint + resume)
            print(
                f"[hf_cpu] replica {self.replica_rank}: weight sync {self.weight_syncs}, "
                f"{len(named_tensors)} tensors, sha256 {weights_digest(named_tensors)}",
                flush=True,
            )
            return self.weight_syncs

    async def wake_up(self):
        if self.rollout_mode == RolloutMode.HYBRID:  # verl's rollout_mode on the workers -> update_weights
            await asyncio.gather(*[w.wake_up.remote() for w in self.workers])

    async def sleep(self):
        if self.rollout_mode == RolloutMode.HYBRID:
            await asyncio.gather(*[w.sleep.remote() for w in self.workers])

    async def clear_kv_cache(self):
        return None

    # ------------------------------------------------------------------ generation
    async def generate(
        self,
        prompt_ids: list[int],
        sampling_params: dict[str, Any],
        request_id: str,
        image_data: list[Any] | None = None,
        video_data: list[Any] | None = None,
    ) -> TokenOutput:
        if video_data:
            raise ValueError("hf_cpu rollout: video inputs are not supported")
        async with self._lock:  # one generation at a time per server (the process has one core's worth)
            return await asyncio.to_thread(self._generate, list(prompt_ids), dict(sampling_params), image_data)

    def _max_tokens(self, n_prompt: int, sp: dict) -> int:
        possible = self.max_model_len - n_prompt
        if possible < 0:
            raise ValueError(f"hf_cpu rollout: prompt length {n_prompt} exceeds the model context {self.max_model_len}")
        if "max_tokens" in sp:
            wanted = int(sp.pop("max_tokens"))
        elif "max_new_tokens" in sp:
            wanted = int(sp.pop("max_new_tokens"))
        else:
            wanted = self.config.response_length + self.config.prompt_length - n_prompt
        return max(0, min(wanted, possible))

    def _generate(self, prompt_ids: list[int], sp: dict, images: list | None) -> TokenOutput:
        want_logprobs = bool(sp.pop("logprobs", False))
        max_tokens = self._max_tokens(len(prompt_ids), sp)
        if max_tokens == 0:
            return TokenOutput(token_ids=[], log_probs=[] if want_logprobs else None, stop_reason="completed")
        inputs = {
            "input_ids": torch.tensor([prompt_ids]),
            "attention_mask": torch.ones(1, len(prompt_ids), dtype=torch.long),
        }
        if images:
            vision = self.processor.image_processor(images=list(images), return_tensors="pt")
            merge = int(self.processor.image_processor.merge_size) ** 2
            expected = int(sum(int(g.prod()) // merge for g in vision["image_grid_thw"]))
            got = prompt_ids.count(int(self.processor.image_token_id))
            if got != expected:
                raise ValueError(
                    f"hf_cpu rollout: the prompt has {got} image-pad tokens but its {len(images)} "
                    f"image(s) need {expected}"
                )
            inputs.update(pixel_values=vision["pixel_values"], image_grid_thw=vision["image_grid_thw"])
        temperature = float(sp.get("temperature", 1.0))
        kwargs = dict(
            max_new_tokens=max_tokens,
            eos_token_id=self.eos_token_ids,
            pad_token_id=self.pad_token_id,
            return_dict_in_generate=True,
            output_scores=want_logprobs,
            repetition_penalty=float(sp.get("repetition_penalty", 1.0)),
        )
        if temperature > 0:
            top_k = int(sp.get("top_k", -1))
            kwargs.update(
                do_sample=True,
                temperature=temperature,
                top_p=float(sp.get("top_p", 1.0)),
                top_k=top_k if top_k > 0 else 0,
            )
        else:
            kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        with torch.no_grad():
            out = self.model.generate(**inputs, **kwargs)
        token_ids = out.sequences[0, len(prompt_ids) :].tolist()
        log_probs = None
        if want_logprobs:
            log_probs = [
                float(torch.log_softmax(score[0].float(), -1)[tok]) for score, tok in zip(out.scores, token_ids)
            ]
        return TokenOutput(token_ids=token_ids, log_probs=log_probs, stop_reason="completed")


class HFCPUReplica(RolloutReplica):
    """verl rollout replica whose server is an :class:`HFCPUServer` (hybrid mode only)."""

    def get_ray_class_with_init_args(self):
        raise NotImplementedError(
            "the hf_cpu rollout runs in verl's hybrid mode only (actor and rollout share "
            "the workers); colocated/standalone rollout is not supported"
        )

    async def launch_servers(self):
        if self.rollout_mode != RolloutMode.HYBRID:
            self.get_ray_class_with_init_args()
        assert len(self.workers) == self.world_size, (
            f"{len(self.workers)} workers for a rollout world of {self.world_size}"
        )
        node_id = await self.workers[0].__ray_call__.remote(lambda self: ray.get_runtime_context().get_node_id())
        server = (
            ray.remote(HFCPUServer)
            .options(
                name=server_name(self.replica_rank),
                num_cpus=0,
                scheduling_strategy=ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy(
                    node_id=node_id, soft=False
                ),
            )
            .remote(
                config=self.config,
                model_config=self.model_config,
                rollout_mode=self.rollout_mode,
                workers=self.workers,
                replica_rank=self.replica_rank,
            )
        )
        await server.ready.remote()
        self.servers = [server]
        self._server_handle = server
        self._server_address = f"hf_cpu/replica-{self.replica_rank}"


class HFCPURollout(BaseRollout):
    """Worker-side half (built by verl's FSDP worker): forwards the actor's weights to its server."""

    def __init__(self, config: RolloutConfig, model_config: HFModelConfig, device_mesh):
        super().__init__(config, model_config, device_mesh)
        rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else 0
        self.replica_rank = rank // _rollout_world_size(self.config)
        self.is_leader = (
            all(device_mesh[d].get_local_rank() == 0 for d in ("infer_tp", "infer_pp"))
            if device_mesh is not None
            else True
        )

    async def resume(self, tags: list[str]):
        return None

    async def release(self):
        return None

    async def update_weights(self, weights, peft_config=None, **kwargs):
        if peft_config is not None:
            raise NotImplementedError("hf_cpu rollout: LoRA weight sync is not supported")
        # iterate on every rank: gathering a DTensor's full value is a collective of the FSDP group
        named = [(name, tensor.detach().to("cpu").clone()) for name, tensor in weights]
        if self.is_leader:
            server = ray.get_actor(server_name(self.replica_rank))
            await server.update_weights.remote(named)

    def generate_sequences(self, prompts):
        raise NotImplementedError("hf_cpu rollout serves the agent loops (async mode) only")
