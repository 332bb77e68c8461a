"""The files of one data-engine run, all under one work directory.

::

    <work>/
      .insight_o3.lock           held by whichever step runs (one step at a time per work directory)
      generate/records.jsonl     one record per chain (``<question key>#<k>``): the question, its steps, the final
                                 answer, the repairs, a malformed attempt's steps, usage and cost
      generate/step_card.json    the settings the first run fixed, each run's history, totals
      check/records.jsonl        tier 1: one record per well-formed chain: the judge's reply, its parsed list, passed
      check/step_card.json
      score/records.jsonl        tier 2: one record per chain that passed tier 1: its 1-100 scores, the reply
      score/step_card.json
      export/reason_sft.json     the reasoning agent's SFT set (LLaVA conversations)
      export/summary_sft.json    the summary agent's SFT set (kept and flawed chains)
      export/dpo_pairs.jsonl     DPO pairs for TRL's DPOTrainer (images, prompt, chosen, rejected)
      export/ranking.jsonl       per question: every chain, its tier and score, in rank order
      export/export_card.json    the export's settings (fixed by its first run), counts, each file's sha256

Every ``records.jsonl`` is an append-only crash-safe record log keyed by ``sample_key`` (the chain's key); the
export's files are rewritten atomically.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

STEPS = ("generate", "check", "score", "export")
EXPORT_FILES = ("reason_sft.json", "summary_sft.json", "dpo_pairs.jsonl", "ranking.jsonl")


class EngineInputError(ValueError):
    """Unusable input (a missing step output, a malformed record); the message names the file and what to run."""


@dataclass(frozen=True)
class WorkDir:
    root: Path

    @classmethod
    def at(cls, path: str | os.PathLike) -> WorkDir:
        return cls(Path(path))

    def step(self, name: str) -> Path:
        if name not in STEPS:
            raise ValueError(f"unknown step {name!r}")
        return self.root / name

    def records(self, step: str) -> Path:
        return self.step(step) / "records.jsonl"

    def card(self, step: str) -> Path:
        return self.step(step) / ("export_card.json" if step == "export" else "step_card.json")

    def export_file(self, name: str) -> Path:
        if name not in EXPORT_FILES:
            raise ValueError(f"unknown export file {name!r}")
        return self.step("export") / name

    def require(self, step: str) -> Path:
        """The record log of ``step``; :class:`EngineInputError` naming the step to run when it is missing."""
        path = self.records(step)
        if not path.exists():
            raise EngineInputError(f"{path} not found: run the '{step}' step first")
        return path
