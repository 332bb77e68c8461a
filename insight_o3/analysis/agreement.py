"""Would another judge agree? Agreement of the verdicts that several judges gave on the same responses.

The runs are one evaluation and its re-judgings (``rejudge``: same responses, another judge), so item
``(sample, trial)`` holds the same response in every run. An item counts when every judge *judged* it
(``correct`` or ``wrong``); truncated and no-answer items are never judged, and items a judge lost to
API errors are left out (and counted). Per pair of judges: the share of items they agree on and
Cohen's κ with its cluster-bootstrap interval (:mod:`.kappa`; items resampled by cluster: by default the samples
sharing an image, :mod:`.clusters`), over all judged items and over the items at least
one of the two decided with its model (``judge_method == "judge"``; an answer matching the ground
truth by rule is correct for every judge of the same flow, which inflates κ). Each judge's accuracy
is over all items, as its run's metrics count it. A disagreement is an item on which not all judges
give the same verdict: its question, ground truth, response and every judge's verdict and output.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import combinations

import numpy as np

from ..base.json_types import JSONObject
from ..evaluation.schema import EvalRecord
from ..protocol.statuses import JUDGED_STATUSES, VerdictStatus
from .clusters import Cluster, cluster_labels
from .kappa import MIN_SAMPLES_FOR_INTERVAL, cohen_kappa, fleiss_kappa, kappa_interval
from .outcomes import PairingError
from .run_records import RunRecords


def judge_name(run: RunRecords) -> str:
    """``<judge model> (<flow>)`` from the run card, else the run's name."""
    j = (run.card or {}).get("judge") or {}
    if j.get("model"):
        return f"{j['model']} ({j.get('flow') or '?'})"
    return run.name


def judge_labels(runs: list[RunRecords]) -> list[str]:
    """One distinct label per run: its :func:`judge_name`; where two share it (a re-judging with the source's own
    judge, as a reproducibility check), ``[<run name>]`` is added, then ``[<run directory>]`` where the names repeat
    too (a re-judged run's card keeps its source's ``eval_name``), then ``#<position>`` (the same run given twice).
    Every verdict and accuracy is keyed by its label, so two equal labels would merge two judges into one."""
    labels = [judge_name(r) for r in runs]
    for qualify in (lambda r, i: f"[{r.name}]", lambda r, i: f"[{r.path}]", lambda r, i: f"#{i + 1}"):
        repeated = {x for x in labels if labels.count(x) > 1}
        labels = [f"{x} {qualify(r, i)}" if x in repeated else x for i, (x, r) in enumerate(zip(labels, runs))]
    return labels


@dataclass
class Disagreement:
    key: str
    trial: int
    category: str
    question: str
    answer: str
    response: str | None
    verdicts: dict[str, str]  # judge -> status
    outputs: dict[str, list]  # judge -> what its model replied (empty when decided by rule)
    methods: dict[str, str | None]  # judge -> "rule" | "judge"

    def to_dict(self) -> JSONObject:
        return {
            "key": self.key,
            "trial": self.trial,
            "category": self.category,
            "question": self.question,
            "answer": self.answer,
            "response": self.response,
            "verdicts": self.verdicts,
            "judge_outputs": self.outputs,
            "judge_methods": self.methods,
        }


@dataclass
class JudgeAgreement:
    judges: list[str]
    runs: list[str]  # the run directory of each judge
    items: int  # (sample, trial) items
    judged: int  # items every judge judged
    lost: dict[str, int]  # judge -> items it lost to API errors
    accuracy: dict[str, float]
    pairs: list[dict] = field(default_factory=list)
    disagreements: list[Disagreement] = field(default_factory=list)
    fleiss: dict | None = None  # three or more judges: {"kappa", "ci", "n", "samples", "clusters"}
    cluster: Cluster = Cluster.IMAGE

    def to_dict(self) -> JSONObject:
        return {
            "judges": self.judges,
            "runs": self.runs,
            "items": self.items,
            "judged_by_all": self.judged,
            "lost": self.lost,
            "accuracy": self.accuracy,
            "pairs": self.pairs,
            "fleiss": self.fleiss,
            "cluster": str(self.cluster),
            "disagreements": [d.to_dict() for d in self.disagreements],
        }


def _by_item(run: RunRecords) -> dict[tuple[str, int], EvalRecord]:
    return {(r.sample_key, k): r for k, t in enumerate(run.trials) for r in t}


def judge_agreement(runs: list[RunRecords], cluster: Cluster = Cluster.IMAGE) -> JudgeAgreement:
    """Agreement of the judges of ``runs`` (an evaluation and its re-judgings) on the same items; κ's intervals
    resample ``cluster`` clusters (the first run's images by default)."""
    if len(runs) < 2:
        raise PairingError("judge agreement needs two or more judged runs")
    names = judge_labels(runs)
    items = [_by_item(r) for r in runs]
    keys = list(items[0])
    for name, it in zip(names[1:], items[1:]):
        if set(it) != set(keys):
            raise PairingError(f"{names[0]} and {name} judged other (sample, trial) items; re-judge the same run")
    first = [items[0][k] for k in keys]
    group = cluster_labels([r.sample_key for r in first], [r.image for r in first], cluster)
    status = {n: [it[k].status for k in keys] for n, it in zip(names, items)}
    correct = {n: [s == VerdictStatus.CORRECT for s in status[n]] for n in names}
    method = {n: [it[k].eval_result.judge_method for k in keys] for n, it in zip(names, items)}
    judged = [i for i in range(len(keys)) if all(status[n][i] in JUDGED_STATUSES for n in names)]
    pairs = []
    for a, b in combinations(names, 2):
        both = [i for i in range(len(keys)) if status[a][i] in JUDGED_STATUSES and status[b][i] in JUDGED_STATUSES]
        by_model = [i for i in both if "judge" in (method[a][i], method[b][i])]
        xa, xb = [status[a][i] for i in both], [status[b][i] for i in both]
        labels = np.array([[correct[a][i], correct[b][i]] for i in both], bool).reshape(-1, 2)
        pairs.append(
            {
                "a": a,
                "b": b,
                "n": len(both),
                "agreement": (sum(x == y for x, y in zip(xa, xb)) / len(both)) if both else None,
                "kappa": _finite(cohen_kappa(xa, xb)),
                "kappa_ci": _listed(kappa_interval(labels, [group[i] for i in both])),
                "samples": len({keys[i][0] for i in both}),
                "clusters": len({group[i] for i in both}),
                "n_judge_decided": len(by_model),
                "kappa_judge_decided": _finite(
                    cohen_kappa([status[a][i] for i in by_model], [status[b][i] for i in by_model])
                ),
            }
        )
    dis = []
    for i in judged:
        if len({status[n][i] for n in names}) > 1:
            r = items[0][keys[i]]
            dis.append(
                Disagreement(
                    r.sample_key,
                    keys[i][1],
                    r.category,
                    r.question,
                    r.answer,
                    r.eval_result.response,
                    {n: status[n][i] for n in names},
                    {n: list(it[keys[i]].eval_result.judge_outputs) for n, it in zip(names, items)},
                    {n: method[n][i] for n in names},
                )
            )
    fleiss = None
    if len(names) >= 3:
        labels = np.array([[correct[n][i] for n in names] for i in judged], bool).reshape(-1, len(names))
        fleiss = {
            "kappa": _finite(fleiss_kappa(labels)),
            "ci": _listed(kappa_interval(labels, [group[i] for i in judged])),
            "n": len(judged),
            "samples": len({keys[i][0] for i in judged}),
            "clusters": len({group[i] for i in judged}),
        }
    return JudgeAgreement(
        names,
        [r.path for r in runs],
        len(keys),
        len(judged),
        {n: sum(s == VerdictStatus.FAILED for s in status[n]) for n in names},
        {n: (sum(correct[n]) / len(keys)) if keys else 0.0 for n in names},
        pairs,
        dis,
        fleiss,
        cluster,
    )


def _listed(ci: tuple[float, float] | None) -> list[float] | None:
    return None if ci is None else list(ci)  # as JSON has it


def _finite(v: float) -> float | None:
    return None if v != v else v  # NaN (kappa undefined) -> None (JSON null)


def agreement_lines(ag: JudgeAgreement, max_disagreements: int = 10) -> list[str]:
    """A short text summary: each judge's accuracy, κ per pair, the first disagreements."""

    def num(v: float | None, fmt: str = ".3f") -> str:
        return "—" if v is None else format(v, fmt)

    unit = "images" if ag.cluster is Cluster.IMAGE else "samples"

    def interval(ci: tuple[float, float] | list[float] | None, clusters: int) -> str:
        return "" if ci is None else f"{kappa_ci_text(ci, clusters, unit)} "

    out = [f"judge agreement on {ag.items} item(s) (sample x trial), {ag.judged} judged by every judge:"]
    for j in ag.judges:
        lost = f", {ag.lost[j]} lost to API errors" if ag.lost[j] else ""
        out.append(f"  {j}: accuracy {100 * ag.accuracy[j]:.1f}%{lost}")
    for pr in ag.pairs:
        out.append(
            f"  {pr['a']} vs {pr['b']}: agree {num(pr['agreement'] and 100 * pr['agreement'], '.1f')}% of "
            f"{pr['n']}, kappa {num(pr['kappa'])} {interval(pr['kappa_ci'], pr['clusters'])}(on the "
            f"{pr['n_judge_decided']} item(s) a judge model decided: {num(pr['kappa_judge_decided'])})"
        )
    if ag.fleiss is not None:
        f = ag.fleiss
        out.append(
            f"  Fleiss' kappa of all {len(ag.judges)} judges: {num(f['kappa'])} {interval(f['ci'], f['clusters'])}"
            f"on the {f['n']} item(s) every judge judged"
        )
    out.append(f"  {len(ag.disagreements)} disagreement(s)" + (":" if ag.disagreements else ""))
    for d in ag.disagreements[:max_disagreements]:
        verdicts = ", ".join(f"{j}: {v}" for j, v in d.verdicts.items())
        out.append(f"    {d.key} (trial {d.trial}): {verdicts}")
    if len(ag.disagreements) > max_disagreements:
        out.append(f"    … {len(ag.disagreements) - max_disagreements} more in the JSON file")
    return out


def kappa_ci_text(ci: tuple[float, float] | list[float] | None, clusters: int, unit: str = "samples") -> str:
    """A κ interval as printed and shown: ``[lo, hi]``, flagged below :data:`~.kappa.MIN_SAMPLES_FOR_INTERVAL`
    resampled clusters (``unit``: what a cluster is)."""
    if ci is None:
        return "—"
    few = f" (only {clusters} {unit}: too narrow)" if clusters < MIN_SAMPLES_FOR_INTERVAL else ""
    return f"[{ci[0]:.3f}, {ci[1]:.3f}]{few}"
