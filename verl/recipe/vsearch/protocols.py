"""What ``vsearch.variant`` decides: the training protocol of each variant (:data:`PROTOCOLS`), as plain data.

Kept apart from :mod:`recipe.vsearch.settings` (which validates the composed config with OmegaConf and verl's
``BaseConfig``) so that the rollout, reward and loss code, and the protocol goldens, read it without that stack.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from insight_o3.protocol.rewards import REWARD_VARIANTS

#: recipe.vsearch.on_policy.EQ2_LOSS_AGG_MODE (not imported: on_policy imports verl)
EQ2_LOSS_AGG_MODE = "seq-mean-token-sum-norm"
#: the values of ``vsearch.variant``, the one switch of the training protocol
VARIANTS = REWARD_VARIANTS


@dataclass(frozen=True)
class Protocol:
    """What ``vsearch.variant`` decides besides the reward's own rules (:class:`insight_o3.protocol.rewards.RewardRules`).

    ``original``: the authors' verl fork at 926d137 (``recipe/vsearch/config/qwen_2_5_vl_7b_async.yaml``,
    ``_base.sh``, ``verl/trainer/ppo/ray_trainer.py``, ``verl/utils/reward_score/vsearch_batch.py``;
    line references in ``docs/fidelity.md``). ``paper``: the paper's text (Eq. 2, D.1) where it says something, the
    recipe's own safer rule where it does not. The YAML reads the verl keys from here
    (``${vsearch_protocol:<field>}``) and :meth:`RunSettings._check` refuses an override that contradicts them."""

    variant: str
    #: ``actor.loss_agg_mode``: verl's per-micro-batch ``token-mean`` (fork, verl's default) or the linear
    #: ``seq-mean-token-sum-norm`` the recipe weights per sample into Eq. 2 (``recipe.vsearch.on_policy.apply_eq2``)
    loss_agg_mode: str
    #: ``actor.use_dynamic_bsz`` (fork: True, micro-batches of at most ``ppo_max_token_len_per_gpu`` tokens)
    use_dynamic_bsz: bool
    #: samples of an in-loop episode cut by an API failure: trained on (fork) or masked out of the loss
    mask_failed_episodes: bool
    #: a vReasoner that exhausts its format retries is a critical failure (fork: ``request.success`` False) or
    #: an episode without an answer (c = 0)
    format_exhaustion_is_failure: bool
    #: default of ``vsearch.max_api_failure_ratio`` (fork: ``agent.max_critical_failure_ratio`` 0.2)
    max_api_failure_ratio: float
    #: rounds of judge calls for one answer check, and the pause between rounds (fork ``RewardComputer``:
    #: ``max_retries`` 10, ``retry_interval`` 30 s); with 1 round a failed check is a critical failure
    judge_rounds: int
    judge_retry_interval_s: float
    #: the step aborts when more rows than this share lost their answer check after every round (fork:
    #: ``min_success_rate`` 0.99 over every row the batch scores); the rest are dropped and replaced by
    #: copies of kept rows (fork: ``compute_score_success`` False). None: a lost check is a critical failure
    max_judge_failure_ratio: float | None
    #: rows added to reach a multiple of the data-parallel size: copies of the batch's first rows, trained like
    #: them (fork: ``pad_dataproto_to_divisor``) or copies with an all-zero response mask (no sample, no token)
    pad_rows_trained: bool
    #: how ``global_norm`` normalises in-loop advantages (``algorithm.inloop_norm``, recipe.vsearch.hybrid_advantage):
    #: the fork's ``np.std`` always divided (``original``) or torch's unbiased std under ``norm_adv_by_std_in_grpo``
    inloop_norm: str
    #: the vReasoner's user hints in training rollouts (:data:`insight_o3.protocol.prompts.REASONER_HINTS`): the fork's
    #: (``fork``, the same as at evaluation) or the paper's F.1 training hints that ask again for ``<tool_feedback>``
    #: (``paper_f1``); validation rollouts and evaluation always use the fork's
    reasoner_train_hints: str
    #: the vSearcher's text after its last allowed crop: the normal reminder (fork: its loop renders each tool turn
    #: on its own, ``tool_agent_loop.py:329-336``, so the template's limit branch never fires) or the limit text
    #: (paper F.1: "for the last turn, we notify vSearcher")
    searcher_limit_reminder: bool
    #: a vSearcher episode that runs out of its token budget (a tool response that no longer fits, a turn cut at the
    #: budget, a generation the server aborts): ended as the fork's loop ends it (``tool_agent_loop.py:348-349``:
    #: its box is the last turn's ``<answer>``, none -> no box, the vReasoner episode is not a critical failure) or
    #: marked ``failed`` (the vReasoner episode is a critical failure)
    budget_end_fails_searcher: bool
    #: ``data.batch_sampler.stream`` / ``.seed`` (:mod:`recipe.vsearch.sampler`): the fork's stream (torch generator,
    #: seed 1: ``vsearch_sampler.py:52``, ``data.seed`` unset in the fork) or the recipe's mixed batches (seed 42)
    sampler_stream: str
    sampler_seed: int
    #: the fork's token checks on a vSearcher turn (``insight_o3_agent_loop.py:152-159``): a pad token or a token id
    #: past ``MAX_ALLOWED_TOKEN_ID`` 151664 ends the episode (its box: the last turn's ``<answer>``)
    end_on_bad_token: bool
    #: the in-loop judge sees the vReasoner's turn left-truncated to this many characters (fork ``maybe_truncate``,
    #: ``insight_o3_agent_loop.py:340-346``); None: the whole turn
    judge_turn_chars: int | None
    #: how the in-loop judge's reply is read (:func:`insight_o3.evaluation.judge.judged_correct`): the fork's
    #: ``"<correct>" in reply`` as it is (``fork``; "<wrong> (not <correct>)" scores correct) or ``strict``, where an
    #: ambiguous reply is a lost check, asked again in the next judge round
    judge_verdicts: str


PROTOCOLS = {
    "original": Protocol(
        variant="original",
        loss_agg_mode="token-mean",
        use_dynamic_bsz=True,
        mask_failed_episodes=False,
        format_exhaustion_is_failure=True,
        max_api_failure_ratio=0.2,
        judge_rounds=10,
        judge_retry_interval_s=30.0,
        max_judge_failure_ratio=0.01,
        pad_rows_trained=True,
        inloop_norm="original",
        reasoner_train_hints="fork",
        searcher_limit_reminder=False,
        budget_end_fails_searcher=False,
        sampler_stream="fork",
        sampler_seed=1,
        end_on_bad_token=True,
        judge_turn_chars=4096,
        judge_verdicts="fork",
    ),
    "paper": Protocol(
        variant="paper",
        loss_agg_mode=EQ2_LOSS_AGG_MODE,
        use_dynamic_bsz=False,
        mask_failed_episodes=True,
        format_exhaustion_is_failure=False,
        max_api_failure_ratio=0.5,
        judge_rounds=1,
        judge_retry_interval_s=0.0,
        max_judge_failure_ratio=None,
        pad_rows_trained=False,
        inloop_norm="paper",
        reasoner_train_hints="paper_f1",
        searcher_limit_reminder=True,
        budget_end_fails_searcher=True,
        sampler_stream="mixed",
        sampler_seed=42,
        end_on_bad_token=False,
        judge_turn_chars=None,
        judge_verdicts="strict",
    ),
}
#: the field names the YAML may read through ``${vsearch_protocol:<field>}``
PROTOCOL_FIELDS = tuple(f.name for f in fields(Protocol) if f.name != "variant")
