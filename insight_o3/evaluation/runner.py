"""Runs a solver over every (sample, trial) pair with resumable per-sample records.

Layout under ``<output_dir>/<eval_name>/``: ``args.json``, ``summary_metrics.json`` and, per
trial ``k`` (0-based), ``trial_<k>/{eval_records.jsonl, eval_metrics.json, done}``. A trial with
``done`` is skipped; otherwise only pairs without a final record are queried (with
``retry_failed`` also those whose record is a critical failure; a failure of the judge alone is
re-judged from the stored response without querying the model again). Questions on the same image
are scheduled together so the image store serves them from one encode.

The whole run holds the eval directory's lock (:mod:`insight_o3.run_lock`), so a second run on the
same directory is refused at once. With a :class:`~insight_o3.run_guard.RunGuard` (the one its
clients report to), a fatal API response or too many failed requests stop the run: the work in
flight is cancelled and not recorded, everything recorded before stays. An output file that cannot
be written stops it the same way, with :class:`~insight_o3.storage.atomic.OutputError`.

Each record carries the token ``usage`` per role of its attempt and its judging (every client reports
to the usage meter of the asyncio task that sent the request: one per solve, split over its trials,
and one per judging; see :mod:`insight_o3.usage`) and ``cost_usd``. With a budget
(``max_cost``/``max_tokens_total``, counted over everything recorded in the eval dir) reached, no new
item is started, the ones in flight are recorded, and :class:`BudgetExceeded` is raised; a rerun with
a higher budget resumes. A solver with ``solves_by_trial`` (rejudge's stored attempts) is asked per
trial index (``solve_trials``) and gives the stored usage (``usage_shares``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from tqdm.auto import tqdm

from ..run_guard import RunGuard, RunStopped, gather_or_stop
from ..run_lock import run_lock
from ..solver import Attempt
from ..storage.atomic import OutputError, write_json_atomic
from ..storage.record_log import RecordFileError, RecordLog, touch_atomic
from ..trajectory import image_refs
from ..usage import CostModel, UsageMeter, merge, metering, total_tokens
from .judge import AnswerJudge, Verdict
from .metrics import compute_metrics, summarize
from .samples import Sample
from .schema import EvalRecord, EvalResult

log = logging.getLogger(__name__)

RECORDS_FILE = "eval_records.jsonl"
METRICS_FILE = "eval_metrics.json"
DONE_FILE = "done"
SUMMARY_FILE = "summary_metrics.json"
ARGS_FILE = "args.json"
RUN_CARD_FILE = "run_card.json"


@dataclass
class RunConfig:
    output_dir: str
    eval_name: str
    num_trials: int = 1
    concurrency: int = 128
    retry_failed: bool = False
    group_trials: bool = True  # one solve(sample, n) for all pending trials of a sample
    progress: bool = True
    cost_model: CostModel | None = None  # adds cost_usd to records and metrics
    max_cost: float | None = None  # budgets over the whole eval dir (all trials, earlier runs too)
    max_tokens_total: int | None = None

    @property
    def eval_dir(self) -> str:
        return os.path.join(self.output_dir, self.eval_name)

    def trial_dir(self, k: int) -> str:
        return os.path.join(self.eval_dir, f"trial_{k}")


class BudgetExceeded(RunStopped):
    """``--max_cost`` / ``--max_tokens_total`` reached: no new work started, work in flight recorded."""

    resume_hint = None  # not "rerun the same command": the same budget stops again (``str()`` says what to do)

    def __init__(self, what: str, used: float, limit: float):
        super().__init__(what, used, limit)
        self.what, self.used, self.limit = what, used, limit

    def __str__(self) -> str:
        flag = "--max_cost" if self.what == "cost" else "--max_tokens_total"
        used = f"${self.used:.4f}" if self.what == "cost" else f"{int(self.used)} tokens"
        return (
            f"budget reached: {used} used, {flag} {self.limit:g}; stopped starting new samples "
            f"(rerun with a higher {flag} to resume)"
        )


def build_record(
    sample: Sample,
    trial: int,
    attempt: Attempt,
    verdict: Verdict,
    usage: dict | None = None,
    cost_usd: float | None = None,
) -> EvalRecord:
    """One result line: the sample's fields, ``usage`` per role and ``cost_usd`` (see
    :mod:`insight_o3.usage`) plus ``eval_result`` (image references, never pixels)."""
    refs = image_refs(attempt.trajectory or [])
    result = EvalResult(
        status=verdict.status,
        success=verdict.status in ("correct", "wrong"),
        fail_reason=verdict.fail_reason,
        fail_stage=verdict.fail_stage,  # type: ignore[arg-type]
        response=attempt.text,
        finish_reason=attempt.finish_reason,
        extracted_answer=verdict.extracted_answer,
        is_correct=verdict.is_correct,
        has_answer=verdict.has_answer,
        judge_method=verdict.method,
        judge_outputs=verdict.judge_outputs,
        usage=attempt.usage,
        image=refs[0].to_dict() if refs else None,
        trajectory=attempt.trajectory,
        stats=attempt.stats,
    )
    rec = EvalRecord.from_dict(
        {
            **sample.to_record(),
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
    return Attempt(er.response, er.finish_reason, trajectory=er.trajectory, usage=er.usage, stats=er.stats or {})


def run_totals(trial_metrics: list[dict]) -> dict:
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


def _spent_before(cfg: RunConfig, open_trials: list[int], logs: dict) -> dict:
    """Tokens and cost already recorded in the eval dir (finished trials and open trials' records)."""
    spent = {"tokens": 0, "cost": 0.0}
    for k in range(cfg.num_trials):
        if k in logs:
            recs = logs[k].records.values()
            spent["tokens"] += sum(total_tokens(r.usage_dict()) for r in recs)
            spent["cost"] += sum(r.cost_usd or 0.0 for r in recs)
        elif k not in open_trials:
            try:
                with open(os.path.join(cfg.trial_dir(k), METRICS_FILE)) as f:
                    m = json.load(f)
            except (OSError, ValueError):
                continue
            spent["tokens"] += m.get("tokens_total", 0)
            spent["cost"] += m.get("cost_usd") or 0.0
    return spent


def _image_order(samples: list[Sample]) -> list[Sample]:
    """Samples grouped by image (first appearance order), so one encode serves them all."""
    groups: dict[str, list[Sample]] = {}
    for s in samples:
        groups.setdefault(s.image_path, []).append(s)
    return [s for g in groups.values() for s in g]


def _is_done(cfg: RunConfig, k: int) -> bool:
    d = cfg.trial_dir(k)
    if not os.path.exists(os.path.join(d, DONE_FILE)):
        return False
    if cfg.retry_failed:
        try:
            with open(os.path.join(d, METRICS_FILE)) as f:
                stats = json.load(f)["overall_stats"]
            if stats.get("failed", 0):
                return False
        except (OSError, ValueError, KeyError):
            return False
    return True


class _Progress:
    def __init__(self, total: int, initial_records: list[EvalRecord], enabled: bool):
        self.correct = sum(r.status == "correct" for r in initial_records)
        self.failed = sum(r.status == "failed" for r in initial_records)
        self.done = len(initial_records)
        self.bar = tqdm(total=total, initial=self.done, desc="eval", disable=not enabled, dynamic_ncols=True)
        self._show()

    def _show(self):
        self.bar.set_postfix(
            acc=f"{self.correct / self.done:.3f}" if self.done else "-", fail=self.failed, refresh=False
        )

    def add(self, rec: EvalRecord):
        st = rec.status
        self.correct += st == "correct"
        self.failed += st == "failed"
        self.done += 1
        self._show()
        self.bar.update(1)

    def close(self):
        self.bar.close()


async def run_evaluation(
    samples: list[Sample],
    solver,
    judge: AnswerJudge,
    cfg: RunConfig,
    args_record: dict | None = None,
    guard: RunGuard | None = None,
    run_card: dict | None = None,
) -> dict:
    """Evaluate, write every output file, and return the summary metrics (under the eval
    directory's lock: raises :class:`~insight_o3.run_lock.RunLockedError` if another run holds it).
    Raises :class:`BudgetExceeded` when a budget of ``cfg`` is reached (what finished is recorded)."""
    with run_lock(cfg.eval_dir, "evaluate"):
        return await _run_locked(samples, solver, judge, cfg, args_record, guard, run_card)


async def _run_locked(
    samples: list[Sample],
    solver,
    judge: AnswerJudge,
    cfg: RunConfig,
    args_record: dict | None,
    guard: RunGuard | None,
    run_card: dict | None = None,
) -> dict:
    if args_record is not None:
        write_json_atomic(os.path.join(cfg.eval_dir, ARGS_FILE), args_record)
    if run_card is not None:
        write_json_atomic(os.path.join(cfg.eval_dir, RUN_CARD_FILE), run_card)
    keys = [s.key for s in samples]
    known = set(keys)
    open_trials = [k for k in range(cfg.num_trials) if not _is_done(cfg, k)]
    logs: dict[int, RecordLog] = {}
    writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="records")
    try:
        for k in open_trials:
            done_path = os.path.join(cfg.trial_dir(k), DONE_FILE)
            try:
                os.makedirs(cfg.trial_dir(k), exist_ok=True)
                if os.path.exists(done_path):  # reopened by --retry_failed
                    os.remove(done_path)
            except OSError as e:
                raise OutputError.from_os_error(e.filename or cfg.trial_dir(k), e, "prepare") from None
            logs[k] = RecordLog.open(os.path.join(cfg.trial_dir(k), RECORDS_FILE), parse=EvalRecord.from_dict)
            stray = [key for key in logs[k].records if key not in known]
            if stray:
                raise RecordFileError(
                    f"{logs[k].path}: holds records for {len(stray)} sample(s) not in the annotation file "
                    f"(e.g. sample_key {stray[0]!r}); use another --eval_name for different data"
                )

        def pending(k: int, s: Sample) -> str | None:
            """None (final), "query" or "judge" (re-judge a stored response)."""
            rec = logs[k].records.get(s.key)
            if rec is None:
                return "query"
            er = rec.eval_result
            if cfg.retry_failed and er.status == "failed":
                return "judge" if er.fail_stage == "judge" else "query"
            return None

        work: list[tuple[Sample, list[int], str]] = []
        initial = []
        for s in _image_order(samples):
            query = []
            for k in open_trials:
                p = pending(k, s)
                if p is None:
                    initial.append(logs[k].records[s.key])
                elif p == "judge":
                    work.append((s, [k], "judge"))
                else:
                    query.append(k)
            if query:
                if cfg.group_trials:
                    work.append((s, query, "query"))
                else:
                    work.extend((s, [k], "query") for k in query)

        progress = _Progress(len(samples) * len(open_trials), initial, cfg.progress)
        sem = asyncio.Semaphore(max(1, cfg.concurrency))
        loop = asyncio.get_running_loop()
        spent = _spent_before(cfg, open_trials, logs)
        budget: list[BudgetExceeded] = []

        def charge(rec: EvalRecord | None):
            if rec is not None:
                spent["tokens"] += total_tokens(rec.usage_dict())
                spent["cost"] += rec.cost_usd or 0.0
            if budget:
                return
            if cfg.max_cost is not None and spent["cost"] >= cfg.max_cost:
                budget.append(BudgetExceeded("cost", spent["cost"], cfg.max_cost))
            elif cfg.max_tokens_total is not None and spent["tokens"] >= cfg.max_tokens_total:
                budget.append(BudgetExceeded("tokens", spent["tokens"], cfg.max_tokens_total))

        if work:
            charge(None)  # spent by earlier runs

        async def finish(s: Sample, k: int, attempt: Attempt, solve_usage: dict):
            meter = UsageMeter()
            metering(meter)  # this task's own context: the judge requests of this attempt
            verdict = await judge.check(s, attempt)
            if guard is not None and guard.tripped:
                return  # stopping: what is in flight may carry the failure that stopped the run
            usage = merge([solve_usage, meter.to_dict()])
            cost = cfg.cost_model.cost(usage) if cfg.cost_model is not None else None
            rec = build_record(s, k, attempt, verdict, usage, cost)
            await loop.run_in_executor(writer, logs[k].append, rec)
            progress.add(rec)
            charge(rec)

        async def run_item(s: Sample, trials: list[int], kind: str):
            async with sem:
                if budget:
                    return  # budget reached: start nothing new (a rerun with a higher budget resumes)
                meter = UsageMeter()
                metering(meter)  # this task's own context: the solver's requests for these trials
                shares = None
                if kind == "judge":
                    old = logs[trials[0]].records[s.key]
                    attempts = [_attempt_from_record(old)]
                    shares = [{r: c for r, c in old.usage_dict().items() if r != "judge"}]
                else:
                    try:
                        if getattr(solver, "solves_by_trial", False):  # rejudge's stored attempts
                            attempts = list(await solver.solve_trials(s, trials))
                            shares = solver.usage_shares(s, trials)
                        else:
                            attempts = list(await solver.solve(s, len(trials)))
                    except asyncio.CancelledError:
                        raise
                    except Exception as e:  # a solver must not raise; never lose the pair if it does
                        log.exception("solver raised on sample %s", s.key)
                        reason = judge.redact(f"solver raised {type(e).__name__}: {e}")
                        attempts = [Attempt(None, None, error=reason) for _ in trials]
                    if len(attempts) != len(trials):
                        bad = f"solver returned {len(attempts)} attempts for {len(trials)} trials"
                        attempts = [Attempt(None, None, error=bad) for _ in trials]
                if shares is None or len(shares) != len(trials):
                    shares = meter.split(len(trials))
                await asyncio.gather(*(finish(s, k, a, u) for k, a, u in zip(trials, attempts, shares)))

        try:
            await gather_or_stop((run_item(*w) for w in work), guard)
        finally:
            progress.close()
        if budget:
            raise budget[0]

        for k in open_trials:
            lg = logs[k]
            missing = [key for key in keys if key not in lg.records]
            if missing:  # cannot happen unless a task was cancelled; never write metrics then
                raise RuntimeError(f"{lg.path}: {len(missing)} sample(s) without a record")
            lg.compact(keys)
            metrics = compute_metrics([lg.records[key] for key in keys])
            write_json_atomic(os.path.join(cfg.trial_dir(k), METRICS_FILE), metrics)
            touch_atomic(os.path.join(cfg.trial_dir(k), DONE_FILE))
    finally:
        for lg in logs.values():
            lg.close()
        writer.shutdown(wait=True)

    trial_metrics = []
    for k in range(cfg.num_trials):
        with open(os.path.join(cfg.trial_dir(k), METRICS_FILE)) as f:
            trial_metrics.append(json.load(f))
    summary = summarize(trial_metrics)
    summary["run_totals"] = run_totals(trial_metrics)
    write_json_atomic(os.path.join(cfg.eval_dir, SUMMARY_FILE), summary)
    return summary
