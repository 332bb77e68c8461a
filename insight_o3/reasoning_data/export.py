"""Step ``export``: the assessed chains as the sets the trainers read (ours, rows IVD13-IVD16; the release ships
neither its data nor how it was assembled).

Every chain gets one **tier** (:class:`Tier`): ``kept`` (passed the answer check and scored at least ``min_score``),
``low_score`` (passed, scored below or not at all), ``wrong_answer`` (failed the check), ``malformed`` (the
generator's output broke the format even after its retry), or ``pending`` (a step has not reached it: a failed
request, or a step not run yet). Per question the chains are ranked: kept by score (high first), then low scores,
then wrong answers (ties by key).

* ``reason_sft.json`` — the reasoning agent's SFT set: the ``keep_top`` best kept chains of each question, in
  LLaVA's conversation format (what the release's ``llava/train/train.py`` reads): ``{"id", "image",
  "conversations": [human: origin + REASON_SUFFIX, gpt: "<thoughts>\\n" + chain + "\\n</thoughts>"]}``, the human text
  exactly what ``evaluate --agent insight_v`` sends (with LLaVA's ``<image>`` marker), ``image`` relative to the
  annotation's image directory.
* ``summary_sft.json`` — the summary agent's: every kept chain, and flawed ones (``wrong_answer``, ``low_score``)
  so that ``flawed_ratio`` of the set is flawed (fewer when there are not that many), picked by a seeded hash; the
  human text is the summary prompt over the chain as the reasoning agent would write it, the answer the ground truth
  (it must answer right whether the chain is right or not).
* ``dpo_pairs.jsonl`` — DPO pairs for the reasoning agent in the vision-language format of TRL's ``DPOTrainer``:
  ``{"images": [path], "prompt": [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": …}]}],
  "chosen": [{"role": "assistant", "content": [{"type": "text", "text": …}]}], "rejected": […]}`` (plus
  ``question_key``, ``chosen_key``, ``rejected_key``, their tiers and scores); up to ``pairs_per_question`` per
  question: the i-th best kept chain against the i-th worst rejected one (a wrong answer, else a low score at least
  ``dpo_min_margin`` points below). ``images`` are absolute paths.
* ``ranking.jsonl`` — per question, every chain's key, tier and score in rank order.
"""

from __future__ import annotations

import enum
import hashlib
import os
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from ..agents.insight_v import (
    IMAGE_TOKEN,
    THOUGHTS_CLOSE,
    THOUGHTS_OPEN,
    origin_question,
    reason_chain,
    reason_question,
    summary_question,
)
from ..base.json_types import JSONObject
from ..storage.atomic import write_json_atomic, write_jsonl_atomic
from .chain import chain_text
from .settings import ExportSettings


class Tier(enum.StrEnum):
    KEPT = "kept"
    LOW_SCORE = "low_score"
    WRONG_ANSWER = "wrong_answer"
    MALFORMED = "malformed"
    PENDING = "pending"


#: rejected at tier 0 (the generator's format), tier 1 (the answer), tier 2 (the score)
REJECTED = (Tier.MALFORMED, Tier.WRONG_ANSWER, Tier.LOW_SCORE)


@dataclass(frozen=True)
class Assessed:
    """One chain with its verdicts."""

    chain: JSONObject  # the generate record
    tier: Tier
    score: int | None

    @property
    def key(self) -> str:
        return str(self.chain["sample_key"])


def assess(
    generated: dict[str, JSONObject], checks: dict[str, JSONObject], scores: dict[str, JSONObject], min_score: int
) -> list[Assessed]:
    """Every generated chain's tier and score (see the module docstring)."""
    out = []
    for key, g in generated.items():
        status = g.get("status")
        if status == "malformed":
            out.append(Assessed(g, Tier.MALFORMED, None))
            continue
        c = checks.get(key)
        if status != "ok" or c is None or c.get("status") != "ok":
            out.append(Assessed(g, Tier.PENDING, None))
            continue
        if not c.get("passed"):
            out.append(Assessed(g, Tier.WRONG_ANSWER, None))
            continue
        s = scores.get(key)
        if s is None or s.get("status") not in ("ok", "unscored"):
            out.append(Assessed(g, Tier.PENDING, None))
            continue
        score = s.get("score") if s.get("status") == "ok" else None
        kept = isinstance(score, int) and score >= min_score
        out.append(Assessed(g, Tier.KEPT if kept else Tier.LOW_SCORE, score if isinstance(score, int) else None))
    return out


_RANK = {Tier.KEPT: 0, Tier.LOW_SCORE: 1, Tier.WRONG_ANSWER: 2, Tier.MALFORMED: 3, Tier.PENDING: 4}


def ranked(chains: list[Assessed]) -> list[Assessed]:
    """Best first: kept by score, then low scores (by score), then wrong answers, malformed, pending; ties by key."""
    return sorted(chains, key=lambda a: (_RANK[a.tier], -(a.score or 0), a.key))


def reasoning_target(chain: JSONObject) -> str:
    """What the reasoning agent learns to write: the chain in its ``<thoughts>`` span (ours, row IVD13)."""
    return f"{THOUGHTS_OPEN}\n{chain_text(list(chain.get('steps') or []))}\n{THOUGHTS_CLOSE}"


def _origin(chain: JSONObject) -> str:
    return origin_question(str(chain["question"]), chain.get("options") or None)


def _pick(seed: int, key: str) -> str:
    return hashlib.sha256(f"{seed}:{key}".encode()).hexdigest()


def reason_row(a: Assessed) -> JSONObject:
    c = a.chain
    return {
        "id": a.key,
        "image": c["image"],
        "conversations": [
            {"from": "human", "value": reason_question(_origin(c))},
            {"from": "gpt", "value": reasoning_target(c)},
        ],
        "score": a.score,
    }


def summary_row(a: Assessed) -> JSONObject:
    c = a.chain
    chain = reason_chain(reasoning_target(c))  # as the summariser sees a reasoning agent's reply at inference
    return {
        "id": a.key,
        "image": c["image"],
        "conversations": [
            {"from": "human", "value": summary_question(_origin(c), chain)},
            {"from": "gpt", "value": str(c["answer"])},
        ],
        "chain_tier": a.tier.value,
        "score": a.score,
    }


def dpo_prompt_text(chain: JSONObject) -> str:
    """The reasoning prompt after its image: what ``evaluate --agent insight_v`` sends after the image part."""
    return reason_question(_origin(chain)).partition(IMAGE_TOKEN)[2]


def dpo_row(chosen: Assessed, rejected: Assessed) -> JSONObject:
    c = chosen.chain

    def turn(a: Assessed) -> list[JSONObject]:
        return [{"role": "assistant", "content": [{"type": "text", "text": reasoning_target(a.chain)}]}]

    return {
        "images": [os.path.abspath(str(c["image_path"]))],
        "prompt": [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": dpo_prompt_text(c)}]}],
        "chosen": turn(chosen),
        "rejected": turn(rejected),
        "question_key": c["question_key"],
        "chosen_key": chosen.key,
        "rejected_key": rejected.key,
        "chosen_tier": chosen.tier.value,
        "rejected_tier": rejected.tier.value,
        "chosen_score": chosen.score,
        "rejected_score": rejected.score,
    }


def dpo_pairs(group: list[Assessed], s: ExportSettings) -> list[JSONObject]:
    """The pairs of one question's ranked chains: each kept chain, best first, against the worst rejected chain not
    yet paired whose reasoning differs from it. A pair of identical reasoning texts carries no preference (DPO's
    margin and gradient are 0 on it); a policy that has converged writes many, so they are skipped, not trained on."""
    kept = [a for a in group if a.tier is Tier.KEPT]
    losers = [a for a in reversed(group) if a.tier in (Tier.WRONG_ANSWER, Tier.LOW_SCORE)]  # worst first
    pairs: list[JSONObject] = []
    for chosen in kept:
        if len(pairs) >= s.pairs_per_question:
            break
        text = reasoning_target(chosen.chain)
        for i, rejected in enumerate(losers):
            if rejected.tier is Tier.LOW_SCORE and (chosen.score or 0) - (rejected.score or 0) < s.dpo_min_margin:
                continue
            if reasoning_target(rejected.chain) == text:
                continue
            pairs.append(dpo_row(chosen, losers.pop(i)))
            break
    return pairs


def build(chains: list[Assessed], s: ExportSettings) -> dict[str, Any]:
    """The export's rows (pure): ``reason``, ``summary``, ``dpo``, ``ranking`` and the ``counts``."""
    groups: dict[str, list[Assessed]] = defaultdict(list)
    for a in chains:
        groups[str(a.chain["question_key"])].append(a)
    reason, dpo, ranking, good, flawed = [], [], [], [], []
    for qkey in sorted(groups):
        group = ranked(groups[qkey])
        kept = [a for a in group if a.tier is Tier.KEPT]
        reason += [reason_row(a) for a in kept[: s.keep_top]]
        good += kept
        flawed += [a for a in group if a.tier in (Tier.WRONG_ANSWER, Tier.LOW_SCORE)]
        dpo += dpo_pairs(group, s)
        ranking.append(
            {"question_key": qkey, "chains": [{"key": a.key, "tier": a.tier.value, "score": a.score} for a in group]}
        )
    want = round(len(good) * s.flawed_ratio / (1 - s.flawed_ratio))
    chosen_flawed = sorted(sorted(flawed, key=lambda a: _pick(s.seed, a.key))[:want], key=lambda a: a.key)
    summary = [summary_row(a) for a in sorted(good, key=lambda a: a.key)] + [summary_row(a) for a in chosen_flawed]
    tiers = {t.value: sum(a.tier is t for a in chains) for t in Tier}
    counts = {
        "chains": len(chains),
        "questions": len(groups),
        "tiers": tiers,
        "reason_sft": len(reason),
        "summary_sft": len(summary),
        "summary_sft_flawed": len(chosen_flawed),
        "dpo_pairs": len(dpo),
    }
    return {"reason": reason, "summary": summary, "dpo": dpo, "ranking": ranking, "counts": counts}


def write(rows: dict[str, Any], files: dict[str, Any]) -> dict[str, str]:
    """Write the rows to ``files`` (name -> path) atomically; their sha256 by name."""
    write_json_atomic(files["reason_sft.json"], rows["reason"])
    write_json_atomic(files["summary_sft.json"], rows["summary"])
    write_jsonl_atomic(files["dpo_pairs.jsonl"], rows["dpo"])
    write_jsonl_atomic(files["ranking.jsonl"], rows["ranking"])
    out = {}
    for name, path in files.items():
        with open(path, "rb") as f:
            out[name] = hashlib.sha256(f.read()).hexdigest()
    return out
