"""Every setting the recipe's own code reads at run time, as one typed, validated object.

:meth:`RunSettings.from_config` builds it from the composed Hydra config: the ``vsearch`` section
(``variant``, ``agent_config_path``, ``stage``, ``judge_model``, ``reward``, ``max_api_failure_ratio``), the agent YAML it points to
(``config/agent_<model>.yaml``, :mod:`recipe.vsearch.agent_config`) and the verl keys the loops
depend on (``actor_rollout_ref.rollout.{prompt,response}_length``, the actor's ``ppo_epochs``,
``trainer.use_legacy_worker_impl``, ``custom_reward_function.reward_kwargs``). The ``vsearch`` section is a
tree of verl ``BaseConfig`` dataclasses (:class:`VSearchConfig`, :class:`RewardSettings`, :class:`FatalSettings`)
converted with verl's ``omega_conf_to_dataclass``: OmegaConf's structured merge refuses an unknown key or a value of
the wrong type, their ``__post_init__`` what cannot work; every error names the full key (``vsearch.fatal.k``), and
the file, line and field for the agent YAML.

Who reads it:

* the driver (``main.py``): validates it before Ray starts and prints :meth:`RunSettings.describe`
  once; ``DRY_RUN=1`` / ``--cfg job`` prints the same table (``python -m recipe.vsearch.settings``);
* both agent loops (:func:`run_settings`, built once per process): vSearcher pixel budget, crop
  limit and token budget; vReasoner model, image budget, prompts, call limit, token cap, format
  retries; judge model; API concurrency / retries / timeouts;
* the reward function, through ``custom_reward_function.reward_kwargs`` (= ``vsearch.reward``);
* the actor update (:mod:`recipe.vsearch.on_policy`): one optimizer step per training step;
* the trainer (:mod:`recipe.vsearch.trainer`, :func:`run_settings` each step): the API-failure abort ratio.

The training protocol. ``vsearch.variant`` (``original``, the default: the authors' verl fork at 926d137, which
the released vSearcher was trained with; ``paper``: the paper's text) is the one switch: it selects the reward's
rules (``vsearch.reward.variant`` follows it), the loss aggregation, what an API failure does to an episode's
samples, the abort thresholds, judge retries, how the batch is padded and the vReasoner's user hints in training
rollouts (the fork's, or the paper's F.1 training hints) (:class:`Protocol`, :data:`PROTOCOLS`).
The recipe YAML reads the verl keys it decides through the ``${vsearch_protocol:<field>}`` resolver.

Stage and rollout phase. ``vsearch.stage`` (``train`` in train.sh, ``eval`` in val.sh) picks the
vSearcher's pixel budget (D.1: ≈3.2M / ≈12.8M). The vReasoner's prompts follow the *rollout*: the
training prompts (with ``<tool_feedback>``) for training rollouts, the inference prompts for every
validation rollout, as the original (its agent loop passes ``enable_tool_feedback=False`` when
validating). The vSearcher's token budget is the run's ``rollout.response_length`` (9216 in train.sh,
32768 in val.sh): verl 0.7 pads every row of a run to one response length.
"""

from __future__ import annotations

import sys
from dataclasses import asdict, dataclass, field, fields, is_dataclass, replace
from typing import Any, ClassVar

from omegaconf import MISSING, DictConfig, OmegaConf
from omegaconf.errors import ConfigKeyError, OmegaConfBaseException
from pydantic import TypeAdapter, ValidationError, conint
from verl.base_config import BaseConfig
from verl.utils.config import omega_conf_to_dataclass

from insight_o3.agents.config import ReasonerSettings
from insight_o3.agents.drivers import VREASONER_COMPLETION_KWARGS
from insight_o3.base.json_types import JSONObject
from insight_o3.protocol.fatal import DEFAULT_K, FatalMode
from insight_o3.protocol.prompts import REASONER_HINTS, ReasonerHints
from insight_o3.protocol.rewards import PSEUDO_IOU_TYPES, REWARD_TYPES, REWARD_VARIANTS, RewardRules, RewardWeights

from .agent_config import STAGES, AgentConfig, load_agent_config
from .padding import PADDED_PATH_OVERRIDES, logits_gb
from .protocols import PROTOCOL_FIELDS, PROTOCOLS, VARIANTS, Protocol


def protocol(variant: str) -> Protocol:
    if variant not in PROTOCOLS:
        raise SettingsError(f"vsearch.variant must be one of {VARIANTS}, got {variant!r}")
    return PROTOCOLS[variant]


def _protocol_resolver(name: str, *, _root_: Any) -> Any:
    """``${vsearch_protocol:<field>}``: the field of :data:`PROTOCOLS` for the config's ``vsearch.variant``."""
    if name not in PROTOCOL_FIELDS:
        raise SettingsError(f"vsearch_protocol: unknown field {name!r}; known: {list(PROTOCOL_FIELDS)}")
    return getattr(protocol(_root_.vsearch.variant), name)


def register_resolvers() -> None:
    """Register ``vsearch_protocol`` with OmegaConf (idempotent). Done on import of this module, which every
    process that resolves the recipe's config imports first (main.py, the TaskRunner, the tests)."""
    if not OmegaConf.has_resolver("vsearch_protocol"):
        OmegaConf.register_new_resolver("vsearch_protocol", _protocol_resolver)


#: text tokens of a vSearcher prompt besides the image (system prompt + task); the original sized
#: ``data.max_prompt_length`` as image tokens + 1024
PROMPT_TEXT_TOKENS = 1024
#: pixels per image token of Qwen2.5-VL (14 px patches merged 2x2)
PIXELS_PER_TOKEN = 28 * 28
#: the one FSDP strategy of the actor and the reference policy: what the CPU driver test runs (FSDP2 on gloo:
#: frozen vision tower, reference offload, weight sync to vLLM, checkpoints); verl's default would be FSDP1
ACTOR_STRATEGY = "fsdp2"


#: options the recipe cannot honour, rejected at start-up (key -> predicate on its value) ...
UNSUPPORTED = {
    "actor_rollout_ref.rollout.calculate_log_probs": lambda v: v is True,
    "algorithm.rollout_correction.rollout_is": lambda v: True,
    "algorithm.rollout_correction.rollout_rs": lambda v: True,
    "algorithm.rollout_correction.rollout_token_veto_threshold": lambda v: True,
    "algorithm.rollout_correction.bypass_mode": lambda v: v is True,
}
#: ... and why
_DECOUPLED = (
    "decoupled rollout correction needs the rollout's log-probs for every trained token, but the in-loop "
    "rows are rebuilt from several vSearcher requests and the updates are fully on-policy (D.1); leave it unset"
)
UNSUPPORTED_WHY = {
    "actor_rollout_ref.rollout.calculate_log_probs": "not every training row carries rollout log-probs (in-loop "
    "placeholders, DP padding, tool-response tokens) and the update is fully on-policy (D.1); leave it False",
    "algorithm.rollout_correction.rollout_is": _DECOUPLED,
    "algorithm.rollout_correction.rollout_rs": _DECOUPLED,
    "algorithm.rollout_correction.rollout_token_veto_threshold": _DECOUPLED,
    "algorithm.rollout_correction.bypass_mode": _DECOUPLED,
}


class SettingsError(ValueError):
    """A setting that cannot work; the message names the config key (and file)."""


@dataclass
class RewardSettings(BaseConfig):
    """``vsearch.reward``: the reward variant (= ``vsearch.variant``), its numbers and the two ablation switches
    named as in the fork (``reward_type``, ``pseudo_iou_reward_type``); also passed to the reward function as
    ``custom_reward_function.reward_kwargs``. Types and unknown keys: OmegaConf's structured merge
    (:meth:`VSearchConfig.from_config`); the names and ranges: :meth:`__post_init__`."""

    variant: str = MISSING
    format_weight: float = MISSING
    iou_weight: float = MISSING
    alpha: float = MISSING
    max_consecutive_iou: float = MISSING
    min_gt_coverage: float = MISSING
    tool_weight: float = 1.0
    reward_type: str = REWARD_TYPES[0]
    pseudo_iou_reward_type: str = PSEUDO_IOU_TYPES[0]

    #: the fields that hold a name, not a number
    CHOICES: ClassVar[dict[str, tuple[str, ...]]] = {
        "variant": REWARD_VARIANTS,
        "reward_type": REWARD_TYPES,
        "pseudo_iou_reward_type": PSEUDO_IOU_TYPES,
    }

    def __post_init__(self) -> None:
        for name, allowed in self.CHOICES.items():
            if getattr(self, name) not in allowed:
                raise SettingsError(f"vsearch.reward.{name} must be one of {allowed}, got {getattr(self, name)!r}")
        try:
            self.rules()
        except ValueError as e:
            raise SettingsError(f"vsearch.reward: {e}") from None

    def rules(self) -> RewardRules:
        return RewardRules(
            variant=self.variant,
            weights=RewardWeights(
                format=self.format_weight, iou=self.iou_weight, alpha=self.alpha, tool=self.tool_weight
            ),
            max_consecutive_iou=self.max_consecutive_iou,
            min_gt_coverage=self.min_gt_coverage,
            reward_type=self.reward_type,
            pseudo_iou_reward_type=self.pseudo_iou_reward_type,
        )


@dataclass
class FatalSettings(BaseConfig):
    """``vsearch.fatal``: fatal-aware GRPO (OpenSearch-VL; :mod:`insight_o3.protocol.fatal`, :mod:`recipe.vsearch.fatal_grpo`).
    ``mode`` ``off`` (the default: the InSight-o3 protocol, vanilla GRPO) | ``hard_mask`` | ``fatal_mask`` |
    ``fatal_mask_clamp``; ``k``: consecutive tool errors that make a vSearcher episode fatal (a turn the session
    answers with the tool's error text: a box the zoom-in tool cannot use, an unknown tool, malformed arguments).
    ``mode`` is the YAML's text (OmegaConf reads an enum by member name, the YAML writes its value); the
    :class:`FatalMode` is :attr:`fatal_mode`."""

    mode: str = FatalMode.OFF.value
    k: int = DEFAULT_K

    def __post_init__(self) -> None:
        modes = [m.value for m in FatalMode]
        if self.mode not in modes:
            raise SettingsError(f"vsearch.fatal.mode must be one of {modes}, got {self.mode!r}")
        if self.k < 1:
            raise SettingsError(
                f"vsearch.fatal.k: expected a whole number of consecutive tool errors >= 1, got {self.k}"
            )

    @property
    def fatal_mode(self) -> FatalMode:
        return FatalMode(self.mode)

    def describe(self) -> str:
        mode = self.fatal_mode
        if mode is FatalMode.OFF:
            return "off (vanilla GRPO: episodes run to their end, every generated token trained)"
        return (
            f"{mode.value}, K={self.k}: a vSearcher episode stops after K consecutive tool errors; "
            + {
                FatalMode.HARD_MASK: "its every token masked (the hard-masking baseline)",
                FatalMode.FATAL_MASK: "tokens from its fatal step on masked",
                FatalMode.FATAL_MASK_CLAMP: "tokens from its fatal step on masked, advantage max(A, 0)",
            }[mode]
        )


@dataclass
class VSearchConfig(BaseConfig):
    """The ``vsearch`` section of the recipe YAML (``config/qwen_2_5_vl_7b_async.yaml``), converted with verl's
    :func:`~verl.utils.config.omega_conf_to_dataclass`: OmegaConf's structured merge refuses an unknown key and a
    value of the wrong type (naming the key), :meth:`__post_init__` what OmegaConf cannot say (the names, the
    ranges, the required ones). Read once by :meth:`RunSettings.from_config`, which adds the variant's defaults."""

    variant: str = "original"  # absent only in the loops' partial configs
    agent_config_path: str | None = None  # null in the YAML: train.sh / val.sh set it
    judge_model: str | None = None
    stage: str = MISSING
    #: None: the variant's (:attr:`Protocol.max_api_failure_ratio`; the YAML reads it through the resolver)
    max_api_failure_ratio: float | None = None
    fatal: FatalSettings = field(default_factory=FatalSettings)
    reward: RewardSettings = MISSING

    def __post_init__(self) -> None:
        if not self.agent_config_path:
            raise SettingsError("vsearch.agent_config_path: required (train.sh/val.sh set it from API_MODEL_FOR_AGENT)")
        if self.stage not in STAGES:
            raise SettingsError(f"vsearch.stage must be one of {STAGES}, got {self.stage!r}")
        if self.judge_model is None or not self.judge_model.strip():
            raise SettingsError(f"vsearch.judge_model: required (JUDGE_MODEL), got {self.judge_model!r}")
        protocol(self.variant)
        if self.reward.variant != self.variant:
            raise SettingsError(
                f"vsearch.reward.variant is {self.reward.variant!r} but vsearch.variant is {self.variant!r}: the "
                "recipe YAML sets it to ${vsearch.variant}, the one switch of the training protocol; set "
                "vsearch.variant instead"
            )
        ratio = self.max_api_failure_ratio
        if ratio is not None and not 0.0 <= ratio <= 1.0:
            raise SettingsError(f"vsearch.max_api_failure_ratio: expected a number in [0, 1], got {ratio!r}")

    @classmethod
    def from_config(cls, config: DictConfig) -> VSearchConfig:
        """The composed config's ``vsearch`` section, resolved (its interpolations read the whole config) and
        converted; an error names the key (``vsearch.fatal.k: Value 'x' of type 'str' could not be converted to
        Integer``)."""
        node = select(config, "vsearch")
        if not isinstance(node, DictConfig) or not node:
            raise SettingsError(
                "config has no 'vsearch' section (the recipe's settings; see config/qwen_2_5_vl_7b_async.yaml)"
            )
        try:
            section = OmegaConf.to_container(node, resolve=True)
        except OmegaConfBaseException as e:
            raise SettingsError(f"{e.full_key}: {_reason(e)}") from None
        try:
            vs: VSearchConfig = omega_conf_to_dataclass(section, cls)
        except OmegaConfBaseException as e:  # the merge's keys are the section's own
            key = ".".join(["vsearch", *filter(None, [e.full_key])])
            known = (
                [f.name for f in fields(e.object_type) if f.name != "_target_"] if is_dataclass(e.object_type) else []
            )
            allowed = f"; allowed: {known}" if isinstance(e, ConfigKeyError) and known else ""
            raise SettingsError(f"{key}: {_reason(e)}{allowed}") from None
        return vs


@dataclass(frozen=True)
class RunSettings:
    """The effective settings of one run (see the module doc for who reads which)."""

    stage: str
    agent_config_path: str
    agent: AgentConfig
    judge_model: str
    vsearcher_response_length: int  # token budget of one vSearcher trajectory (tool responses included)
    vsearcher_prompt_length: int  # rollout.prompt_length: the first turn (system + image + task) must fit
    reward: RewardSettings
    ppo_epochs: int
    max_api_failure_ratio: float  # a training step whose in-loop episodes fail (API) more often aborts
    protocol: Protocol = PROTOCOLS["original"]  # vsearch.variant: the rest of the training protocol
    attention: str = ""  # the model's attention path and what a micro-batch costs on it (start-up table)
    fatal: FatalSettings = field(
        default_factory=FatalSettings
    )  # vsearch.fatal: fatal-aware GRPO (off: the InSight-o3 protocol)

    @property
    def variant(self) -> str:
        return self.protocol.variant

    # ------------------------------------------------------------------ derived values the loops use
    @property
    def vsearcher_max_pixels(self) -> int:
        return self.agent.vsearcher.max_pixels(self.stage)

    @property
    def vsearcher_max_tool_calls(self) -> int:
        return self.agent.vsearcher.max_tool_calls

    def reasoner_mode(self, validate: bool) -> str:
        """``train`` (F.1 training prompts, ``<tool_feedback>``) for training rollouts of a training
        run, ``infer`` (F.1 inference prompts) for validation rollouts and at ``stage=eval``."""
        return "train" if (self.stage == "train" and not validate) else "infer"

    def reasoner_hints(self, validate: bool) -> ReasonerHints:
        """The vReasoner's user hints: the variant's training hints (``Protocol.reasoner_train_hints``) for
        training rollouts, the fork's (as at evaluation) otherwise."""
        name = self.protocol.reasoner_train_hints if self.reasoner_mode(validate) == "train" else "fork"
        return REASONER_HINTS[name]

    def reasoner_format_retries(self, validate: bool) -> int:
        return self.agent.vreasoner.max_format_retries("train" if self.reasoner_mode(validate) == "train" else "eval")

    def reasoner_completion_kwargs(self) -> JSONObject:
        """The vReasoner's request settings per turn: the fork's (``temperature`` 1.0 and ``reasoning_effort`` null
        as ``vsearch_gpt_async.py:142, 221-231`` sends them) with the agent YAML's ``max_completion_tokens``."""
        return {**VREASONER_COMPLETION_KWARGS, "max_completion_tokens": int(self.agent.vreasoner.max_completion_tokens)}

    def reasoner_image_url_extra(self) -> JSONObject:
        return {"detail": self.agent.vreasoner.image_detail}

    def reasoner_settings(self, validate: bool) -> ReasonerSettings:
        """The API vReasoner of one episode (the library's typed settings, as ``evaluate`` builds them)."""
        vr = self.agent.vreasoner
        return ReasonerSettings(
            model=vr.model,
            max_pixels=vr.max_pixels,
            mode=self.reasoner_mode(validate),
            max_search_calls=vr.max_search_calls,
            completion_kwargs=self.reasoner_completion_kwargs(),
            image_url_extra=self.reasoner_image_url_extra(),
            max_format_retries=self.reasoner_format_retries(validate),
            hints=self.reasoner_hints(validate),
            lost_reply_is_attempt=True,  # the fork: an API error uses one of the round's attempts
        )

    # ------------------------------------------------------------------ building
    @classmethod
    def from_config(cls, config: Any) -> RunSettings:
        """Build and validate from the composed config (an OmegaConf ``DictConfig`` or a dict)."""
        config = config if isinstance(config, DictConfig) else OmegaConf.create(config)
        vs = VSearchConfig.from_config(config)
        try:
            agent = load_agent_config(str(vs.agent_config_path))
        except (OSError, ValueError) as e:
            raise SettingsError(str(e)) from None
        kwargs = _container(select(config, "custom_reward_function.reward_kwargs"))
        if kwargs != _container(select(config, "vsearch.reward")):
            raise SettingsError(
                "custom_reward_function.reward_kwargs must equal vsearch.reward (the recipe YAML sets "
                f"it to ${{vsearch.reward}}; change vsearch.reward.* instead), got {kwargs!r}"
            )
        proto = protocol(vs.variant)
        s = cls(
            vs.stage,
            str(vs.agent_config_path),
            agent,
            str(vs.judge_model).strip(),
            _positive_int(config, "actor_rollout_ref.rollout.response_length"),
            _positive_int(config, "actor_rollout_ref.rollout.prompt_length"),
            vs.reward,
            _positive_int(config, "actor_rollout_ref.actor.ppo_epochs"),
            proto.max_api_failure_ratio if vs.max_api_failure_ratio is None else vs.max_api_failure_ratio,
            proto,
            fatal=vs.fatal,
        )
        s._check(config)
        return replace(s, attention=s.attention_path(config))

    def _check(self, config: Any) -> None:
        need = self.vsearcher_max_pixels // PIXELS_PER_TOKEN + PROMPT_TEXT_TOKENS
        if need > self.vsearcher_prompt_length:
            raise SettingsError(
                f"data.max_prompt_length (actor_rollout_ref.rollout.prompt_length) is {self.vsearcher_prompt_length}, but "
                f"the vSearcher's first turn at stage={self.stage} needs up to {need} tokens "
                f"({self.vsearcher_max_pixels} px = {self.vsearcher_max_pixels // PIXELS_PER_TOKEN} image tokens + "
                f"{PROMPT_TEXT_TOKENS}); raise it or lower vsearcher.max_pixels_{self.stage} in {self.agent_config_path}"
            )
        if self.ppo_epochs != 1:
            raise SettingsError(
                f"actor_rollout_ref.actor.ppo_epochs must be 1: the recipe trains fully on-policy "
                f"(one optimizer step per training step, D.1), got {self.ppo_epochs}"
            )
        # the loss of the variant: verl's token-mean over dynamic micro-batches (original), or Eq. 2
        # (recipe.vsearch.on_policy.apply_eq2: a linear per-row aggregation over fixed micro-batches)
        proto = self.protocol
        why = (
            "verl's per-micro-batch token mean over dynamic micro-batches, as the fork trained"
            if proto.variant == "original"
            else "the recipe weights it per sample to give the paper's Eq. 2 (per-sample mean of token means); "
            "verl 0.7 rescales each dynamic micro-batch by its row count, which breaks the weights"
        )
        for key, want in (("loss_agg_mode", proto.loss_agg_mode), ("use_dynamic_bsz", proto.use_dynamic_bsz)):
            value = select(config, f"actor_rollout_ref.actor.{key}")  # absent only in the loops' partial configs
            if value is not None and value != want:
                raise SettingsError(
                    f"actor_rollout_ref.actor.{key} must be {want} under vsearch.variant={proto.variant} ({why}), "
                    f"got {value!r}; switch the whole protocol with vsearch.variant instead"
                )
        if proto.use_dynamic_bsz:
            cap = select(config, "actor_rollout_ref.actor.ppo_max_token_len_per_gpu")
            row = self.vsearcher_prompt_length + self.vsearcher_response_length
            if cap is not None and cap < row:
                raise SettingsError(
                    f"actor_rollout_ref.actor.ppo_max_token_len_per_gpu is {cap}, but a padded row has {row} tokens "
                    "(rollout.prompt_length + response_length): verl's dynamic batches need at least one row"
                )
        for key, bad in UNSUPPORTED.items():
            value = select(config, key)
            if value is not None and value is not False and bad(value):
                raise SettingsError(f"{key}={value!r} is not supported by the vsearch recipe: {UNSUPPORTED_WHY[key]}")
        for key in ("actor_rollout_ref.actor.strategy", "actor_rollout_ref.ref.strategy"):
            strategy = select(config, key)  # absent only in the loops' partial configs
            if strategy is not None and strategy != ACTOR_STRATEGY:
                raise SettingsError(
                    f"{key}={strategy!r} is not supported: the recipe runs and tests one strategy, "
                    f"{ACTOR_STRATEGY!r} (the recipe YAML sets it; the CPU driver test runs it)"
                )
        self._check_padded_path(config)
        self._check_limit_images(config)
        data = select(config, "data")
        if data is not None and "val_batch_size" in data:  # absent only in the loops' partial configs
            vb = data.get("val_batch_size")
            if isinstance(vb, bool) or not isinstance(vb, int) or vb <= 0:
                raise SettingsError(
                    f"data.val_batch_size must be a positive int, got {vb!r}: unset, verl validates the whole "
                    "validation set as one batch (every episode at once, all rows in the driver's memory)"
                )
        impl = select(config, "trainer.use_legacy_worker_impl", "auto")
        if impl not in ("auto", "enable"):
            raise SettingsError(
                f"trainer.use_legacy_worker_impl={impl!r} is not supported: the on-policy update "
                "(recipe.vsearch.on_policy) wraps verl's FSDP ActorRolloutRefWorker; use 'auto'"
            )

    def _check_padded_path(self, config: Any) -> None:
        """Without remove-padding (no flash-attn: ``attn_implementation=sdpa``/``eager``) verl's forward pads every
        row to the step's width; a log-prob micro-batch packed by real tokens (dynamic batches) would compute several
        padded rows of full-vocabulary logits (recipe.vsearch.padding). The log-prob passes take one row each there."""
        if select(config, "actor_rollout_ref.model.use_remove_padding") is not False:
            return
        for role in ("ref", "rollout"):
            key = f"actor_rollout_ref.{role}.log_prob_use_dynamic_bsz"
            if select(config, key) is True:
                raise SettingsError(
                    f"{key}=True with actor_rollout_ref.model.use_remove_padding=False: on the padded path (no "
                    "flash-attn) every row is padded to prompt + response length, so a micro-batch packed by real "
                    "tokens computes several padded rows of logits (≈5 GB of bf16 each at D.1); run the log-prob "
                    "passes one row per micro-batch: " + " ".join(PADDED_PATH_OVERRIDES)
                )

    def attention_path(self, config: Any) -> str:
        """One line for the start-up table: remove-padding, or the padded path and what a micro-batch costs there."""
        if select(config, "actor_rollout_ref.model.use_remove_padding") is not False:
            return "remove-padding (flash-attn varlen): real tokens only"
        attn = select(config, "actor_rollout_ref.model.override_config.attn_implementation", "flash_attention_2")
        width = self.vsearcher_prompt_length + self.vsearcher_response_length
        cap = select(config, "actor_rollout_ref.actor.ppo_max_token_len_per_gpu")
        update = (
            f"update micro-batches of <= {cap} real tokens"
            if select(config, "actor_rollout_ref.actor.use_dynamic_bsz")
            else f"update micro-batches of {select(config, 'actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu')} row(s)"
        )
        return (
            f"padded path ({attn}, no remove-padding; recipe.vsearch.padding): rows {width} tokens wide, each "
            f"micro-batch trimmed to its longest row; log-prob passes one row (<= {width} positions, "
            f"<= {logits_gb(width):.1f} GB of bf16 logits); {update}, each costing its rows x its longest row"
        )

    def _check_limit_images(self, config: Any) -> None:
        """vLLM rejects a request with more images than ``limit_images`` (``limit_mm_per_prompt``) and verl's
        server then fails the whole step: a vSearcher trajectory sends the whole image + one crop per tool call."""
        if select(config, "actor_rollout_ref.rollout.name") != "vllm":
            return
        need = self.vsearcher_max_tool_calls + 1
        limit = select(config, "actor_rollout_ref.rollout.limit_images")
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < need:
            raise SettingsError(
                f"actor_rollout_ref.rollout.limit_images is {limit!r}, but a vSearcher trajectory sends up to {need} "
                f"images to vLLM (the whole image + vsearcher.max_tool_calls={self.vsearcher_max_tool_calls} crops in "
                f"{self.agent_config_path}); set it to at least {need}"
            )

    # ------------------------------------------------------------------ reporting
    def effective(self) -> dict[str, Any]:
        """Flat ``{name: value}`` of what the loops, the reward and the update will use."""
        vr, js = self.agent.vreasoner, self.agent.judge
        return {
            "variant": self.variant,
            "stage": self.stage,
            "agent_config": self.agent_config_path,
            "vsearcher.max_pixels": self.vsearcher_max_pixels,
            "vsearcher.max_tool_calls": self.vsearcher_max_tool_calls,
            "vsearcher.max_response_tokens": self.vsearcher_response_length,
            "vsearcher.max_prompt_tokens": self.vsearcher_prompt_length,
            "vreasoner.model": vr.model,
            "vreasoner.max_pixels": vr.max_pixels,
            "vreasoner.image_detail": vr.image_detail,
            "vreasoner.prompts.training_rollouts": self.reasoner_mode(validate=False),
            "vreasoner.prompts.validation_rollouts": self.reasoner_mode(validate=True),
            "vreasoner.hints.training_rollouts": _hints_name(self.reasoner_hints(validate=False)),
            "vreasoner.hints.validation_rollouts": _hints_name(self.reasoner_hints(validate=True)),
            "vreasoner.max_search_calls": vr.max_search_calls,
            "vreasoner.max_completion_tokens": vr.max_completion_tokens,
            "vreasoner.max_format_retries.training_rollouts": self.reasoner_format_retries(False),
            "vreasoner.max_format_retries.validation_rollouts": self.reasoner_format_retries(True),
            "vreasoner.api": f"concurrency {vr.max_concurrency}, retries {vr.max_retries}, timeout {vr.timeout_s}s",
            "judge.model": self.judge_model,
            "judge.api": f"concurrency {js.max_concurrency}, retries {js.max_retries}, timeout {js.timeout_s}s",
            "abort.max_api_failure_ratio": self.max_api_failure_ratio,
            "fatal": self.fatal.describe(),
            "protocol": ", ".join(f"{k}={v}" for k, v in asdict(self.protocol).items() if k != "variant"),
            "reward": ", ".join(f"{k}={v}" for k, v in self.reward.items() if k != "_target_"),
            "actor.update": f"one optimizer step per training step over the whole batch (ppo_epochs={self.ppo_epochs}; "
            "ppo_mini_batch_size is not used)",
            "attention": self.attention,
        }

    def describe(self) -> str:
        rows = self.effective()
        width = max(map(len, rows))
        return "\n".join(
            [f"[vsearch] effective settings (stage={self.stage}):"]
            + [f"  {k.ljust(width)}  {v}" for k, v in rows.items()]
        )


def _hints_name(hints: ReasonerHints) -> str:
    return next(name for name, h in REASONER_HINTS.items() if h is hints)


# ----------------------------------------------------------------------------- per-process cache
_CACHE: dict[tuple, RunSettings] = {}


def run_settings(config: Any) -> RunSettings:
    """:meth:`RunSettings.from_config`, built once per process and config (verl instantiates an agent
    loop per sample; the agent YAML is read once)."""
    config = config if isinstance(config, DictConfig) else OmegaConf.create(config)
    key = (
        repr(_container(select(config, "vsearch"))),
        select(config, "actor_rollout_ref.actor.loss_agg_mode"),
        select(config, "actor_rollout_ref.actor.use_dynamic_bsz"),
        select(config, "actor_rollout_ref.rollout.response_length"),
        select(config, "actor_rollout_ref.rollout.prompt_length"),
    )
    if key not in _CACHE:
        _CACHE[key] = RunSettings.from_config(config)
    return _CACHE[key]


# ----------------------------------------------------------------------------- config access
def select(config: Any, key: str, default: Any = None) -> Any:
    """``OmegaConf.select``: the value at the dotted ``key`` of ``config`` (a ``DictConfig``), ``default`` where it
    is absent; an interpolation that cannot resolve is a :class:`SettingsError` naming the key."""
    try:
        return OmegaConf.select(config, key, default=default)
    except OmegaConfBaseException as e:
        raise SettingsError(f"{key}: {_reason(e)}") from None


def _container(node: Any) -> Any:
    """A config node as plain, resolved Python (``OmegaConf.to_container``); anything else as it is."""
    return OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node


def _reason(e: OmegaConfBaseException) -> str:
    """OmegaConf's message without the ``full_key`` / ``object_type`` lines it appends (the caller names the key)."""
    return str(e).split("\n    full_key:")[0]


#: a verl length or count the recipe needs positive (no bool, no text)
_POSITIVE_INT = TypeAdapter(conint(strict=True, gt=0))


def _positive_int(config: Any, key: str) -> int:
    value = select(config, key)
    try:
        return _POSITIVE_INT.validate_python(value)
    except ValidationError as e:
        raise SettingsError(f"{key}: {e.errors(include_url=False)[0]['msg']}, got {value!r}") from None


def main(argv: list[str] | None = None) -> int:
    """``python -m recipe.vsearch.settings <composed config .yaml>``: validate and print the effective
    settings (what ``DRY_RUN=1`` shows after the composed config)."""
    from omegaconf import OmegaConf

    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m recipe.vsearch.settings <composed config yaml>", file=sys.stderr)
        return 2
    try:
        print(RunSettings.from_config(OmegaConf.load(argv[0])).describe())
    except SettingsError as e:
        print(f"[vsearch] error: {e}", file=sys.stderr)
        return 2
    return 0


register_resolvers()

if __name__ == "__main__":
    sys.exit(main())
