"""The files of one O3-Bench build, all under one workspace directory (``--output_dir``).

::

    <workspace>/
      .insight_o3.lock          held by whichever step runs (one step at a time per workspace)
      sources.jsonl             one SourceImage per kept image (layouts with ids, size, subset)
      sources_skipped.jsonl     images left out, each with its reason
      extract/records.jsonl     one record per (image, layout) and per full image: the three E.1 sections
      synthesize/records.jsonl  one record per image: the E.2 reply parsed into items
      validate/candidates.jsonl items that passed the checks (target_layouts filled in)
      validate/rejected.jsonl   items that did not, each with one reason
      validate/report.json      counts per reason, F share per image and overall
      validate/rules.json       the validation rules used (and the config file's path and sha256)
      filter/records.jsonl      one record per candidate: every model's attempts and verdicts
      filter/kept.jsonl         candidates not solved by the rule's models (the review queue)
      filter/dropped.jsonl      candidates solved by them
      review/batch_<k>.html     review pages (self-contained)
      review/batch_<k>.decisions.txt  the decisions file of each batch, to be filled in by reviewers
      review/reviewed.jsonl     the items as decided (accepted, edited, rejected, pending)
      release/metadata.jsonl    the benchmark, O3-Bench's layout (images under release/images/{chart,map}/)
      release/stats.json        the paper's B.1 statistics of the release
      release/run_card.json     models, prompts' sha256, seeds, tokens and costs of every step
      <step>/step_card.json     each model-calling step's settings and totals (read by the run card)

Every ``records.jsonl`` is an append-only crash-safe record log keyed by ``sample_key``; the other files are
rewritten atomically by the step that owns them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from .records import BuildFileError

STEPS = ("sources", "extract", "synthesize", "validate", "filter", "review", "release")
#: How a user runs a step (what a message names as the command to run first).
PROG = "python -m insight_o3.scripts.build_o3_bench"
#: The name a step's run holds the workspace's lock under (``build_o3_bench <step>``).
PROG_NAME = "build_o3_bench"


@dataclass(frozen=True)
class Workspace:
    root: Path

    @classmethod
    def at(cls, path: str | os.PathLike) -> Workspace:
        return cls(Path(path))

    def step(self, name: str) -> Path:
        if name not in STEPS:
            raise ValueError(f"unknown step {name!r}")
        return self.root / name

    @property
    def sources(self) -> Path:
        return self.root / "sources.jsonl"

    @property
    def sources_skipped(self) -> Path:
        return self.root / "sources_skipped.jsonl"

    def records(self, step: str) -> Path:
        return self.step(step) / "records.jsonl"

    def step_card(self, step: str) -> Path:
        return self.step(step) / "step_card.json"

    @property
    def candidates(self) -> Path:
        return self.step("validate") / "candidates.jsonl"

    @property
    def rejected(self) -> Path:
        return self.step("validate") / "rejected.jsonl"

    @property
    def validation_report(self) -> Path:
        return self.step("validate") / "report.json"

    @property
    def validation_rules(self) -> Path:
        return self.step("validate") / "rules.json"

    @property
    def kept(self) -> Path:
        return self.step("filter") / "kept.jsonl"

    @property
    def dropped(self) -> Path:
        return self.step("filter") / "dropped.jsonl"

    def review_page(self, batch: int) -> Path:
        return self.step("review") / f"batch_{batch:03d}.html"

    def decisions_file(self, batch: int) -> Path:
        return self.step("review") / f"batch_{batch:03d}.decisions.txt"

    @property
    def reviewed(self) -> Path:
        return self.step("review") / "reviewed.jsonl"

    @property
    def release(self) -> Path:
        return self.step("release")

    def require(self, path: Path, made_by: str) -> Path:
        """``path`` if it exists; else :class:`~.records.BuildFileError` saying which step writes it."""
        if not path.exists():
            raise BuildFileError(f"{path} not found: run the '{made_by}' step first")
        return path
