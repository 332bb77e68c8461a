"""Runs a solver over every (sample, trial) pair with resumable per-sample records.

Layout under ``<output_dir>/<eval_name>/``: ``args.json``, ``summary_metrics.json`` and, per
trial ``k`` (0-based), ``trial_<k>/{eval_records.jsonl, eval_metrics.json, done}``. A trial with
``done`` is skipped; otherwise only pairs without a final record are queried (with
``retry_failed`` also those whose record is a critical failure; a failure of the judge alone is
re-judged from the stored response without querying the model again). Questions on the same image
are scheduled together so the image store serves them from one encode.

The run is straight-line code around a run directory (:func:`~insight_o3.jobs.run_directory.open_run` over a
:class:`~insight_o3.evaluation.run_dir.RunDir`: one record log per open trial) and
:func:`~insight_o3.jobs.execute.execute` (:class:`EvalWork`: a unit of work per sample and its pending trials); so
the whole run holds the eval directory's lock (:mod:`insight_o3.storage.lock`), and a second run on the
same directory is refused at once. With a :class:`~insight_o3.endpoints.guard.RunGuard` (the one its
clients report to), a fatal API response or too many failed requests stop the run: the work in
flight is cancelled and not recorded, everything recorded before stays. An output file that cannot
be written stops it the same way, with :class:`~insight_o3.storage.atomic.OutputError`.

Each record carries the token ``usage`` per role of its attempt and its judging (every client reports
to the usage meter of the asyncio task that sent the request: one per solve, split over its trials,
and one per judging; see :mod:`insight_o3.endpoints.usage`) and ``cost_usd``. With a budget
(``max_cost``/``max_tokens_total``, counted over everything recorded in the eval dir) reached, no new
item is started, the ones in flight are recorded, and :class:`BudgetExceeded` is raised; a rerun with
a higher budget resumes. A :class:`~insight_o3.protocol.attempt.TrialSolver` (rejudge's stored attempts) is
asked per trial index (``solve_trials``) and gives the stored usage (``usage_shares``); a
:class:`~insight_o3.protocol.attempt.Solver` is asked for as many fresh attempts as trials are pending.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import partial

from ..base.caps import DEFAULT_MAX_REPLY_CHARS, cut_messages, cut_middle
from ..base.json_types import JSONObject
from ..base.redaction import redact
from ..endpoints.guard import RunGuard
from ..endpoints.preflight import Called
from ..endpoints.usage import ROLE_KEYS, CostModel, UsageMeter, merge, metering, total_tokens
from ..imaging.prepared_cache import source_digest
from ..jobs.budget import BudgetExceeded
from ..jobs.clients import Clients
from ..jobs.controls import RunControls
from ..jobs.execute import Emit, ItemWork, Plan, execute, spent
from ..jobs.integrity import Invocation
from ..jobs.run_directory import open_run
from ..protocol.attempt import Attempt, FreshTrials, Solver, TrialSolver
from ..protocol.attempt_stats import TextVerdict
from ..protocol.sample import Sample
from ..protocol.statuses import JUDGED_STATUSES, FailStage, UnitKind, VerdictStatus
from ..protocol.trajectory import image_refs
from ..storage.record_log import RecordFileError, RecordLog
from .judge import AnswerJudge, Verdict
from .metrics import compute_metrics, summarize
from .run_dir import ImageChanged, RunDir
from .schema import EvalRecord, EvalResult

__all__ = [
    "BudgetExceeded",
    "EvalWork",
    "RunConfig",
    "build_record",
    "failed_count",
    "run_evaluation",
    "run_totals",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class RunConfig:
    """Where an evaluation run writes and how much of it there is: ``<output_dir>/<eval_name>``, ``num_trials``;
    ``retry_failed``: records that failed are asked again; ``group_trials``: one ``solve(sample, n)`` for all
    pending trials of a sample; ``max_reply_chars``: characters of each reply text a record keeps (see
    :mod:`insight_o3.base.caps`); ``controls``: concurrency, progress, the guard, budgets over the whole eval dir
    (all trials, earlier runs too) and the endpoint check."""

    output_dir: str
    eval_name: str
    num_trials: int = 1
    retry_failed: bool = False
    group_trials: bool = True
    max_reply_chars: int = DEFAULT_MAX_REPLY_CHARS
    controls: RunControls = field(default_factory=RunControls)

    @property
    def eval_dir(self) -> str:
        return os.path.join(self.output_dir, self.eval_name)

    @property
    def run_dir(self) -> RunDir:
        return RunDir(self.eval_dir)

    def trial_dir(self, k: int) -> str:
        return self.run_dir.trial_dir(k)


def build_record(
    sample: Sample,
    trial: int,
    attempt: Attempt,
    verdict: Verdict,
    usage: dict | None = None,
    cost_usd: float | None = None,
    max_reply_chars: int | None = DEFAULT_MAX_REPLY_CHARS,
    image_sha256: str | None = None,
) -> EvalRecord:
    """One result line: the sample's fields, ``usage`` per role and ``cost_usd`` (see
    :mod:`insight_o3.endpoints.usage`) plus ``eval_result`` (image references, never pixels). Every reply text (the
    response, the trajectory's assistant turns, the judge's replies) is cut to ``max_reply_chars``
    (:func:`insight_o3.base.caps.cut_middle`); the trajectory's copy of the response is written as a reference.
    ``image_sha256``: of the image file the attempt was made on (a resume refuses the record once it changes)."""
    refs = image_refs(attempt.trajectory or [])
    response = None if attempt.text is None else cut_middle(attempt.text, max_reply_chars)
    result = EvalResult(
        status=verdict.status,
        success=verdict.status in JUDGED_STATUSES,
        fail_reason=verdict.fail_reason,
        fail_stage=verdict.fail_stage,
        response=response,
        finish_reason=attempt.finish_reason,
        extracted_answer=None
        if verdict.extracted_answer is None
        else cut_middle(verdict.extracted_answer, max_reply_chars),
        is_correct=verdict.is_correct,
        has_answer=verdict.has_answer,
        judge_method=verdict.method,
        judge_outputs=[cut_middle(o, max_reply_chars) if isinstance(o, str) else o for o in verdict.judge_outputs],
        api_usage=attempt.usage,
        image=refs[0].to_dict() if refs else None,
        trajectory=cut_messages(attempt.trajectory, max_reply_chars),
        stats=attempt.stats,
    )
    rec = EvalRecord.from_dict(
        {
            **sample.to_record(),
            "image_sha256": image_sha256,
            "trial": trial,
            "eval_result": {"status": result.status},
            "usage": usage or {},
            "cost_usd": cost_usd,
        }
    )
    rec.eval_result = result
    return rec


def _attempt_from_record(rec: EvalRecord) -> Attempt:
    er = rec.eval_result
    return Attempt(er.response, er.finish_reason, trajectory=er.trajectory, usage=er.api_usage, stats=er.stats)


def run_totals(trial_metrics: list[dict]) -> JSONObject:
    """Tokens and cost of all trials together (the summary's other numbers are per-trial means)."""
    out = {
        "usage": merge([m.get("usage") for m in trial_metrics]),
        "tokens_total": sum(m.get("tokens_total", 0) for m in trial_metrics),
    }
    costs = [m["cost_usd"] for m in trial_metrics if m.get("cost_usd") is not None]
    out["cost_usd"] = sum(costs) if costs else None
    return out


def failed_count(summary: dict) -> int:
    """Sample-trials with status ``failed`` over all trials of a summary (exit code 1 of evaluate/rejudge)."""
    mean = summary.get("overall_stats", {}).get("failed", {}).get("mean", 0)
    return round(mean * summary.get("num_trials", 0))


def _image_order(samples: list[Sample]) -> list[Sample]:
    """Samples grouped by image (first appearance order), so one encode serves them all."""
    groups: dict[str, list[Sample]] = {}
    for s in samples:
        groups.setdefault(s.image_path, []).append(s)
    return [s for g in groups.values() for s in g]


def _accuracy(counts: Counter, done: int) -> JSONObject:
    return {"acc": f"{counts[VerdictStatus.CORRECT] / done:.3f}" if done else "-", "fail": counts[VerdictStatus.FAILED]}


#: One unit of evaluation work: a sample, its pending trials, and what to do with them.
Unit = tuple[Sample, list[int], UnitKind]


class EvalWork(ItemWork[Unit]):
    """One unit of the evaluation: a sample's pending trials answered (or a judge's failure re-judged from the stored
    response), judged, and recorded in each trial's log (``logs``: trial -> its record log)."""

    def __init__(
        self,
        cfg: RunConfig,
        solver: Solver | TrialSolver,
        judge: AnswerJudge,
        logs: Mapping[Hashable, RecordLog],
        guard: RunGuard,
        costs: CostModel | None,
        image_sha256: dict[str, str | None],
    ):
        self.cfg, self.judge, self.logs, self.guard, self.costs = cfg, judge, logs, guard, costs
        #: who answers a unit's trials: rejudge's stored attempts, or a solver's fresh ones
        self.trials = solver if isinstance(solver, TrialSolver) else FreshTrials(solver)
        self.image_sha256 = image_sha256

    def key(self, unit: Unit) -> str:
        return unit[0].key

    def spend(self, record: EvalRecord) -> tuple[int, float]:
        return total_tokens(record.usage_dict()), record.cost_usd or 0.0

    async def _attempts(self, s: Sample, trials: list[int], kind: UnitKind, meter: UsageMeter) -> tuple[list, list]:
        """The attempts of one unit and the usage share of each trial."""
        shares = None
        if kind == UnitKind.JUDGE:
            old = self.logs[trials[0]].records[s.key]
            attempts = [_attempt_from_record(old)]
            shares = [{r: c for r, c in old.usage_dict().items() if r != ROLE_KEYS["judge"]}]
        else:
            try:
                attempts = list(await self.trials.solve_trials(s, trials))
                shares = self.trials.usage_shares(s, trials)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # a solver must not raise; never lose the pair if it does
                log.exception("solver raised on sample %s", s.key)
                reason = redact(f"solver raised {type(e).__name__}: {e}")
                attempts = [Attempt(None, None, error=reason) for _ in trials]
            if len(attempts) != len(trials):
                bad = f"solver returned {len(attempts)} attempts for {len(trials)} trials"
                attempts = [Attempt(None, None, error=bad) for _ in trials]
        if shares is None or len(shares) != len(trials):
            shares = meter.split(len(trials))
        return attempts, shares

    async def _judge_also(self, s: Sample, attempt: Attempt) -> Attempt:
        """The attempt with the verdicts on its other texts (``stats.texts_to_judge()``, e.g. Insight-V's reasoning
        chain) in its stats (``judged``: name -> status, extracted answer, whether it names one): judged as answers by
        the same judge, so attribution can compare them with the answer's verdict."""
        also = attempt.stats.texts_to_judge() if attempt.error is None else {}
        if not also:
            return attempt
        judged: dict[str, TextVerdict] = {}
        for name, item in also.items():
            v = await self.judge.check(s, Attempt(item.text, item.finish_reason or "stop"))
            judged[name] = TextVerdict(status=v.status, extracted_answer=v.extracted_answer, has_answer=v.has_answer)
        return replace(attempt, stats=attempt.stats.with_verdicts(judged))

    async def _judge_and_record(self, s: Sample, k: int, attempt: Attempt, solve_usage: dict, emit: Emit) -> None:
        meter = UsageMeter()
        metering(meter)  # this task's own context: the judge requests of this attempt
        verdict = await self.judge.check(s, attempt)
        if verdict.status != VerdictStatus.FAILED:
            attempt = await self._judge_also(s, attempt)
        if self.guard.tripped:
            return  # stopping: what is in flight may carry the failure that stopped the run
        usage = merge([solve_usage, meter.to_dict()])
        cost = self.costs.cost(usage) if self.costs is not None else None
        rec = build_record(
            s, k, attempt, verdict, usage, cost, self.cfg.max_reply_chars, self.image_sha256.get(s.image_path)
        )
        await emit(rec, log=k)

    async def work(self, unit: Unit, emit: Emit) -> None:
        s, trials, kind = unit
        meter = UsageMeter()
        metering(meter)  # this task's own context: the solver's requests for these trials
        attempts, shares = await self._attempts(s, trials, kind, meter)
        await asyncio.gather(*(self._judge_and_record(s, k, a, u, emit) for k, a, u in zip(trials, attempts, shares)))


def _is_done(cfg: RunConfig, k: int) -> bool:
    """Whether trial ``k`` is finished for good (with ``retry_failed``, one whose metrics count a failure is not)."""
    if not cfg.run_dir.is_done(k):
        return False
    if cfg.retry_failed:
        try:
            if (cfg.run_dir.trial_metrics(k) or {})["overall_stats"].get("failed", 0):
                return False
        except (ValueError, KeyError, TypeError):
            return False
    return True


def _open_trials(cfg: RunConfig, args_record: dict | None) -> list[int]:
    """Under the lock, before the logs open: ``args.json`` written, the trials not done reopened and stamped."""
    run_dir = cfg.run_dir
    run_dir.check_format()
    if args_record is not None:
        run_dir.write_args(args_record)
    open_trials = [k for k in range(cfg.num_trials) if not _is_done(cfg, k)]
    for k in open_trials:
        run_dir.reopen_trial(k)
    run_dir.stamp_trials(sorted({*open_trials, *run_dir.trials()}))
    return open_trials


def _spent_before(cfg: RunConfig, work: EvalWork, logs: Mapping[Hashable, RecordLog]) -> tuple[int, float]:
    """What earlier runs spent: the records of the open trials, and the metrics of the finished ones."""
    tokens, cost = spent(work, logs)
    for k in range(cfg.num_trials):
        if k in logs:
            continue
        try:
            m = cfg.run_dir.trial_metrics(k) or {}
        except ValueError:
            continue
        tokens += m.get("tokens_total", 0)
        cost += m.get("cost_usd") or 0.0
    return tokens, cost


def _pending(cfg: RunConfig, records: dict[str, EvalRecord], s: Sample) -> UnitKind | None:
    """What a trial (its ``records``) still needs for ``s``: None when its record is final."""
    rec = records.get(s.key)
    if rec is None:
        return UnitKind.QUERY
    er = rec.eval_result
    if cfg.retry_failed and er.status == VerdictStatus.FAILED:
        return UnitKind.JUDGE if er.fail_stage == FailStage.JUDGE else UnitKind.QUERY
    return None


def _image_digests(cfg: RunConfig, items: list[Sample], logs: Mapping[Hashable, RecordLog]) -> dict[str, str | None]:
    """The sha256 of every image of ``items`` by path (once per image: :func:`~insight_o3.imaging.prepared_cache.
    source_digest`, which the prepared-image cache reuses; None for a file that cannot be read); :class:`ImageChanged`
    for a record of the run (any trial) made on an image whose file now has another sha256: the run would mix
    answers about two images under one sample."""
    digests: dict[str, str | None] = {}
    for s in items:
        if s.image_path not in digests:
            try:
                digests[s.image_path] = source_digest(s.image_path)[0]
            except OSError:
                digests[s.image_path] = None
    by_key = {s.key: s for s in items}
    run_dir = cfg.run_dir
    for k in range(cfg.num_trials):
        if k in logs:
            path, records = logs[k].path, logs[k].records
        elif run_dir.trial(k).has_records():
            path, records = run_dir.records_path(k), run_dir.records(k)
        else:
            continue
        for key, rec in records.items():
            sample = by_key.get(key)
            now = digests.get(sample.image_path) if sample is not None else None
            if sample is not None and rec.image_sha256 not in (None, now) and now is not None:
                raise ImageChanged(
                    f"{path}: sample_key {key!r} was answered on {sample.image_path} with sha256 "
                    f"{rec.image_sha256}; that file now has sha256 {now} (the image was replaced since). Put "
                    f"the image back to resume, or evaluate the new one as another run (another eval_name)"
                )
    return digests


def _plan(cfg: RunConfig, items: list[Sample], logs: Mapping[Hashable, RecordLog], open_trials: list[int]) -> Plan:
    """The units left: per sample, its open trials without a final record (one unit for all of them with
    ``group_trials``; a judge's failure alone is its own unit); where each trial stands."""
    known = {s.key for s in items}
    for k in open_trials:
        stray = [key for key in logs[k].records if key not in known]
        if stray:
            raise RecordFileError(
                f"{logs[k].path}: holds records for {len(stray)} sample(s) not in the annotation file "
                f"(e.g. sample_key {stray[0]!r}); use another eval_name for different data"
            )
    units: list[Unit] = []
    initial: list[str | None] = []
    done_by_trial = {k: 0 for k in open_trials}  # samples final per open trial
    for s in _image_order(items):
        query = []
        for k in open_trials:
            p = _pending(cfg, logs[k].records, s)
            if p is None:
                initial.append(logs[k].records[s.key].status)
                done_by_trial[k] += 1
            elif p == UnitKind.JUDGE:
                units.append((s, [k], UnitKind.JUDGE))
            else:
                query.append(k)
        if query:
            if cfg.group_trials:
                units.append((s, query, UnitKind.QUERY))
            else:
                units.extend((s, [k], UnitKind.QUERY) for k in query)
    n = len(items)
    where = []
    for k in range(cfg.num_trials):
        done = done_by_trial.get(k, n)  # a trial not reopened is finished
        where.append(f"trial_{k}: {done} of {n} samples done, {n - done} left")
    return Plan(units, n * len(open_trials), initial, where)


def _finish(cfg: RunConfig, keys: list[str], logs: Mapping[Hashable, RecordLog], open_trials: list[int]) -> JSONObject:
    """Each open trial's log compacted and its metrics written, then the summary over all trials."""
    run_dir = cfg.run_dir
    for k in open_trials:
        lg = logs[k]
        missing = [key for key in keys if key not in lg.records]
        if missing:  # cannot happen unless a task was cancelled; never write metrics then
            raise RuntimeError(f"{lg.path}: {len(missing)} sample(s) without a record")
        lg.compact(keys)
        run_dir.finish_trial(k, compute_metrics([lg.records[key] for key in keys]))
    trial_metrics = [run_dir.trial_metrics(k) or {} for k in range(cfg.num_trials)]
    summary = summarize(trial_metrics)
    summary["run_totals"] = run_totals(trial_metrics)
    run_dir.write_summary(summary)
    return summary


async def run_evaluation(
    samples: list[Sample],
    solver: Solver | TrialSolver,
    judge: AnswerJudge,
    cfg: RunConfig,
    args_record: dict | None = None,
    guard: RunGuard | None = None,
    run_card: dict | None = None,
    invocation: Invocation | None = None,
    endpoints: Iterable[Called] = (),
    costs: CostModel | None = None,
    entry_fields: Callable[[], JSONObject] | None = None,
) -> JSONObject:
    """Evaluate, write every output file, and return the summary metrics (under the eval
    directory's lock: raises :class:`~insight_o3.storage.lock.RunLockedError` if another run holds it).
    ``costs``: the price model that adds ``cost_usd`` to records and metrics (None: no prices). Raises
    :class:`BudgetExceeded` when a budget of ``cfg`` is reached (what finished is recorded), and
    :class:`~insight_o3.jobs.integrity.SettingsChanged` (nothing written) when ``invocation`` differs from the
    directory's first run on a setting that can change a result. ``entry_fields``: more fields of the run's entry
    in the card's history (:class:`~insight_o3.jobs.run_directory.RunDirectory`)."""
    run_dir = cfg.run_dir
    with open_run(
        cfg.eval_dir,
        "evaluate",
        cfg.controls,
        store=run_dir,
        invocation=invocation,
        card=run_card,
        change_hint="use another --eval_name to run with other settings",
        guard=guard,
        entry_fields=entry_fields,
    ) as run:
        open_trials = _open_trials(cfg, args_record)
        # absolute: open_logs joins relative names to the run directory, and records_path already holds it
        # (a relative --output_dir, e.g. the default ./outputs/eval, gave <dir>/<dir>/trial_0/...)
        files = {k: os.path.abspath(run_dir.records_path(k)) for k in open_trials}
        logs = run.open_logs(files, EvalRecord.from_dict)
        digests = _image_digests(cfg, samples, logs)
        plan = _plan(cfg, samples, logs, open_trials)
        work = EvalWork(cfg, solver, judge, logs, run.guard, costs, digests)
        async with Clients(run.guard, endpoints) as clients:
            before = partial(_spent_before, cfg, work, logs)
            await execute(run, plan, work, clients, desc="eval", postfix=_accuracy, spent_before=before)
        return _finish(cfg, [s.key for s in samples], logs, open_trials)
