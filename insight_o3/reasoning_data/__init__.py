"""Insight-V's data engine: progressive long-chain reasoning data with a two-tier assessment (Insight-V, CVPR 2025;
released ``data_generation/data_generation.py`` and ``data_check.py`` of dongyh20/Insight-V at 5e9c6f9, the seed
text for what the release leaves out; docs/fidelity.md rows IVD*).

Four steps over one work directory (layout: :mod:`.workspace`), each resumable, costed and with its settings fixed by
its first run — the command ``python -m insight_o3.scripts.build_reasoning_data STEP`` (offline demo:
``python -m insight_o3.scripts.build_reasoning_data_demo``), or these functions of :mod:`.engine`:

============================================================  =========================================================
``engine.generate(work, ann_file, img_dir, generator,          N chains per question: JSON steps (``title``,
settings=GenerateSettings(num_chains=N), run=RunControls())``  ``content``, ``next_action``) asked one at a time with the
                                                               release's prompts, repairs (3 tries a step), cap (16
                                                               steps) and sampling; a malformed chain generated once
                                                               more (:mod:`.generation`, :mod:`.chain`)
``engine.check(work, judge, CheckSettings(), run)``            tier 1: an LLM checks each chain's final answer against
                                                               the ground truth, the release's prompt and reading
                                                               (:mod:`.assessment`)
``engine.score(work, scorer, ScoreSettings(), run)``           tier 2: an MLLM scores each chain that passed, 1-100 for
                                                               logic, hallucination and completeness (ours, from the
                                                               seed text; the rubric is in the step card)
``engine.export(work, ExportSettings(...))``                   the reasoning-agent SFT set, the summary-agent SFT set
                                                               (kept and flawed chains, ``flawed_ratio``), DPO pairs
                                                               (best kept vs. worst rejected chain), the ranking
                                                               (:mod:`.export`)
============================================================  =========================================================

``generator``, ``judge`` and ``scorer`` are :class:`.settings.ModelAccess` (a model and its
:class:`~insight_o3.endpoints.endpoint.Endpoint`); each step's settings are a frozen dataclass of :mod:`.settings`.
``generate``/``check``/``score`` return a :class:`~insight_o3.jobs.execute.JobResult` (``summary``, ``exit_code``: 1 while
items failed — call again to retry them); ``export`` an :class:`.engine.ExportResult` (the files, the counts). A call
with settings other than the step's first run raises :class:`~insight_o3.jobs.integrity.SettingsChanged` and writes
nothing; another process on the same directory, :class:`~insight_o3.storage.lock.RunLockedError`; a budget reached
(``RunControls.max_cost`` / ``max_tokens_total``), :class:`~insight_o3.jobs.budget.BudgetExceeded` (what finished is
recorded). A killed step resumes where it stopped and ends with the same files, byte for byte, as an uninterrupted
one (every request of a chain carries a seed derived from its key, so a sampling server answers the same).

One round of iterative DPO (generate with the current reasoning agent → rank → pairs → DPO → repeat) is::

    from insight_o3.endpoints.endpoint import Endpoint
    from insight_o3.reasoning_data import engine
    from insight_o3.reasoning_data.settings import ExportSettings, GenerateSettings, ModelAccess

    served = ModelAccess(model="reasoner-round-1", api=Endpoint(base_url="http://127.0.0.1:8000/v1"))
    work = "work/round_1"
    engine.generate(work, "train.jsonl", "images/", served, GenerateSettings(num_chains=8, seed=1))
    engine.check(work, ModelAccess(model="Qwen2-72B-Instruct", api=...))
    engine.score(work, ModelAccess(model="Qwen2-VL-72B-Instruct", api=...))
    pairs = engine.export(work, ExportSettings(pairs_per_question=2)).files["dpo_pairs.jsonl"]
    # datasets.load_dataset("json", data_files=pairs).cast_column("images", Sequence(Image())) -> trl.DPOTrainer

``dpo_pairs.jsonl`` rows are TRL's vision-language preference format (``images``, ``prompt`` with an image
placeholder, ``chosen``, ``rejected``, conversational); the SFT sets are LLaVA's conversation format.
"""

__all__ = [
    "assessment",
    "chain",
    "demo",
    "engine",
    "export",
    "generation",
    "prompts",
    "settings",
    "steps",
    "workspace",
]
