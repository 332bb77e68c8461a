"""Re-judge a finished evaluation with another judge: verdicts from the stored responses, no model calls.

    python -m insight_o3.scripts.rejudge outputs/eval/gpt-5-mini/o3_bench --judge_model gpt-5-mini \\
        [--judge_api_base_url URL] [--judge_api_key KEY] [--judge_flow extract|verify] [--eval_name NAME]
    python -m insight_o3.scripts.rejudge outputs/eval/gpt-5-mini/o3_bench --judge_model gpt-5-mini gpt-5 \\
        [--judge_api_base_url URL [URL]] [--judge_api_key KEY [KEY]] [--agreement_out FILE]

Reads every ``trial_<k>/eval_records.jsonl`` of the source eval dir (all its trials must be done) and
writes a new eval dir — by default ``<source>@rejudge-<judge model>`` next to it, or
``<output_dir>/<eval_name>`` — with the same layout (records, metrics, summary, ``run_card.json``),
so the two are directly comparable in ``gather_eval_results``. The answer checking is the evaluation's
own (:class:`~insight_o3.evaluation.judge.AnswerJudge`, same flows and prompts); identical judge
prompts are asked once. Stored model/vSearcher token usage is carried over; the judge's is new.
Rerunning resumes; records whose judging failed are retried with ``--retry_failed``.

Several judges (``--judge_model A B …``, with one ``--judge_api_base_url``/``--judge_api_key`` for all or
one per judge) each write their own eval dir. Then the verdicts of the source run's judge and of every
new one are compared (:mod:`insight_o3.analysis.agreement`): Cohen's κ per pair of judges (Fleiss' κ of all of them when there are three or more, each with a
bootstrap interval over the samples' images, the samples sharing an image resampled together), each
judge's accuracy and the items they disagree on are printed and written to ``--agreement_out``
(default ``<eval_dir>@judge-agreement-<new judges>.json`` next to the source, one file per set of new
judges, so an earlier re-judging's agreement is kept); ``report <eval_dir> --judges <the new
dirs>`` shows them. This happens after a single new judge too (two judges: the source's and the new one).

A rerun into an existing re-judged dir must use the settings its first run fixed (judge, flow, answer length,
cache, source run): otherwise it is refused with status 2, naming each difference (as ``evaluate``).

Exit status as ``evaluate``: 0 done; 2 bad input (no such eval dir, unfinished source trials, bad
price file, changed settings); 3 output not writable; 4 stopped by the judge API or a budget; 5 the output dir is locked.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import re
import sys
from typing import TYPE_CHECKING, TypeAlias

from ..base.json_types import JSONObject
from ..base.setting_kinds import Kind
from ..endpoints.defaults import DEFAULT_MAX_RETRIES
from ..evaluation.judge_settings import FLOWS
from ..protocol.sample import Sample
from ._shared import (
    ExitCode,
    add_budget_flags,
    add_client_flags,
    add_judge_flags,
    add_judge_retries_flag,
    add_key_host_flag,
    add_run_flags,
    entry_point,
    flag_kinds,
    new_parser,
    output_name,
    report_stop,
    run_controls,
    setting,
    setup_logging,
    stop_errors,
)

if TYPE_CHECKING:
    from ..endpoints.usage import CostModel
    from ..evaluation.runner import RunConfig

log = logging.getLogger("insight_o3.rejudge")
#: Record fields that are not annotation fields (the rest is the sample as loaded).
_RESULT_FIELDS = {
    "trial",
    "usage",
    "cost_usd",
    "eval_result",
    "index",
    "sample_key",
    "image_path",
    "category",
    "question_id",
    "question",
    "options",
    "answer",
    "image",
    "file_name",
    "subset",
}


class SourceError(ValueError):
    """An eval dir that cannot be re-judged; the message names the file."""


def sample_from_record(rec: dict) -> Sample:
    """The :class:`Sample` a record was made from (its ``to_record`` inverted)."""
    from ..protocol.sample import row_fields

    image_field = "file_name" if "file_name" in rec and "image" not in rec else "image"
    category_field = (
        "subset" if "subset" in rec else ("category" if rec.get("category") not in (None, "unknown") else None)
    )
    return Sample(
        index=rec.get("index", 0),
        question_id=rec.get("question_id"),
        image=rec.get(image_field) or "",
        image_path=rec.get("image_path") or "",
        question=rec["question"],
        options=rec.get("options"),
        answer=rec["answer"],
        category=str(rec.get("category", "unknown")),
        extra=row_fields({k: v for k, v in rec.items() if k not in _RESULT_FIELDS}),
        key=rec["sample_key"],
        image_field=image_field,
        category_field=category_field,
    )


def _checked(obj: dict, where: str) -> JSONObject:
    """A stored record, validated against the schema (errors name the file, line and field)."""
    from ..evaluation.schema import EvalRecord

    EvalRecord.from_dict(obj, where)
    return obj


#: The source's stored records: trial -> sample key -> record (as written, validated).
StoredRecords: TypeAlias = dict[int, dict[str, JSONObject]]


def load_source(eval_dir: str) -> tuple[list[Sample], StoredRecords, JSONObject]:
    """Samples (file order), records per trial and the source's settings (run card, else args)."""
    from ..evaluation.run_dir import DONE_FILE, RunDir, RunDirError

    rd = RunDir(eval_dir)
    if not rd.exists():
        raise SourceError(f"{eval_dir}: no such eval directory")
    rd.check_format()
    trials = list(range(rd.trial_count()))
    if not trials:
        raise SourceError(f"{eval_dir}: no trial_0 .. trial_<k> with records (is this an eval dir?)")
    records: StoredRecords = {}
    for k in trials:
        if not rd.is_done(k):
            raise SourceError(f"{rd.trial_dir(k)}: trial not finished (no '{DONE_FILE}'); finish the evaluation first")
        records[k] = rd.records(k, parse=_checked)
    first = sorted(records[0].values(), key=lambda r: r.get("index", 0))
    keys = [r["sample_key"] for r in first]
    for k in trials[1:]:
        if set(records[k]) != set(keys):
            raise SourceError(f"{eval_dir}/trial_{k}: holds other samples than trial_0")
    card = rd.run_card()
    if card is None:
        try:
            card = {"settings": rd.args() or {}}
        except RunDirError:
            card = {"settings": {}}
    return [sample_from_record(r) for r in first], records, card


def build_parser() -> argparse.ArgumentParser:
    p = new_parser("python -m insight_o3.scripts.rejudge", __doc__.split("\n")[0])
    setting(p, "eval_dir", help="a finished evaluation directory (<output_dir>/<eval_name>)", kind=Kind.OPERATIONAL)
    add_judge_flags(
        p,
        many=True,
        model_help="one or more judges (each its own eval dir)",
        url_help="one for every judge, or one per judge (default: $JUDGE_API_BASE_URL, then $OPENAI_BASE_URL)",
        key_help="one for every judge, or one per judge (default: $JUDGE_API_KEY, then $OPENAI_API_KEY)",
    )
    setting(p, "--judge_flow", choices=FLOWS, default=None, help="default: the source run's", kind=Kind.RESULT)
    setting(p, "--max_answer_length", type=int, default=None, help="default: the source run's (1000)", kind=Kind.RESULT)
    setting(
        p, "--output_dir", default=None, help="with --eval_name: where the new eval dir goes", kind=Kind.OPERATIONAL
    )
    setting(
        p,
        "--eval_name",
        default=None,
        type=output_name,
        help="the new eval dir is <output_dir>/<eval_name>, <output_dir> defaulting to the source "
        "run's (default: <eval_dir>@rejudge-<judge_model>)",
        kind=Kind.OPERATIONAL,
    )
    add_run_flags(p, concurrency=64, image_workers=False, concurrency_help="judge requests in flight")
    setting(
        p,
        "--no_judge_cache",
        action="store_true",
        help="one judge request per attempt (default: identical judge prompts are asked once)",
        kind=Kind.RESULT,
    )
    setting(
        p,
        "--retry_failed",
        action="store_true",
        help="judge again the records whose judging failed",
        kind=Kind.OPERATIONAL,
    )
    add_judge_retries_flag(p)
    add_key_host_flag(p)
    add_budget_flags(p, what="samples")  # the stored model/vSearcher usage is priced and counted too
    add_client_flags(p, max_retries=DEFAULT_MAX_RETRIES)
    g = p.add_argument_group("judge agreement")
    setting(
        g,
        "--agreement_out",
        default=None,
        help="where the agreement of the source's judge and the new ones goes "
        "(default: <eval_dir>@judge-agreement-<new judge>[+<new judge>...].json)",
        kind=Kind.OPERATIONAL,
    )
    return p


def _per_judge(p: argparse.ArgumentParser, a: argparse.Namespace) -> list[argparse.Namespace]:
    """One set of arguments per judge (its model, base URL and key; keys resolved and registered)."""
    from ..endpoints.endpoint import ENV_KEYS, KeyHostError, borrowed_key, describe, resolve_key, sourced

    n = len(a.judge_model)
    if len(set(a.judge_model)) != n:
        p.error("--judge_model lists a judge twice")
    if n > 1 and a.eval_name:
        p.error("--eval_name names one eval dir; with several judges each gets <eval_dir>@rejudge-<judge>")
    out = []
    for i, model in enumerate(a.judge_model):
        aj = argparse.Namespace(**vars(a))
        aj.judge_model = model
        for name in ("judge_api_base_url", "judge_api_key"):
            values = getattr(a, name) or [None]
            if len(values) not in (1, n):
                p.error(f"--{name} takes one value for all judges or one per judge ({n})")
            setattr(aj, name, values[i] if len(values) == n else values[0])
        url = sourced(aj.judge_api_base_url, "--judge_api_base_url", ENV_KEYS["judge"][1])
        own = sourced(aj.judge_api_key, "--judge_api_key", ("JUDGE_API_KEY",))
        openai_url = sourced(None, "", ("OPENAI_BASE_URL",))
        openai_key = sourced(None, "", ("OPENAI_API_KEY",))
        try:  # $OPENAI_API_KEY only where it belongs (its $OPENAI_BASE_URL, else the SDK's default)
            key = borrowed_key(
                "judge", url, own, "$OPENAI_BASE_URL endpoint", openai_url, openai_key, a.allow_key_to_other_host
            )
        except KeyHostError as e:
            p.error(str(e))
        aj.judge_api_key = resolve_key(aj.judge_api_key, ("JUDGE_API_KEY",), flag="--judge_api_key") or key.value
        aj.judge_api_base_url = url.value
        log.info("endpoints: %s", describe(f"judge {model}", url, key))
        out.append(aj)
    return out


def agreement_path(eval_dir: str, judge_models: list[str]) -> str:
    """``<eval_dir>@judge-agreement-<judge>[+<judge>…].json``: one file per set of new judges, so a later
    ``rejudge`` with other judges does not overwrite the agreement of the earlier ones."""
    return f"{os.path.normpath(eval_dir)}@judge-agreement-{'+'.join(map(_slug, judge_models))}.json"


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name)


def _agreement(a: argparse.Namespace, judges: list[argparse.Namespace], judged_dirs: list[str]) -> None:
    """Compare the source's verdicts with every new judge's; print them and write the JSON file."""
    from ..analysis.agreement import agreement_lines, judge_agreement
    from ..analysis.run_records import read_run
    from ..storage.atomic import write_json_atomic

    try:
        ag = judge_agreement([read_run(d) for d in [a.eval_dir, *judged_dirs]])
    except ValueError as e:  # a run that cannot be read or paired: the re-judging itself is done
        log.warning("judge agreement not computed: %s", e)
        return
    path = a.agreement_out or agreement_path(a.eval_dir, [aj.judge_model for aj in judges])
    write_json_atomic(path, ag.to_dict())
    for line in agreement_lines(ag):
        print(line)
    print(
        f"agreement written to {path}; in the report: python -m insight_o3.scripts.report {a.eval_dir} "
        f"--judges {' '.join(judged_dirs)}"
    )


def _source_output_dir(src: str, src_eval_name: str | None) -> str:
    """The ``--output_dir`` the source run used: its path less its ``eval_name`` (else its parent)."""
    path = os.path.normpath(src)
    name = os.path.normpath(src_eval_name) if src_eval_name else ""
    if name and (path == name or path.endswith(os.sep + name)):
        return path[: len(path) - len(name)].rstrip(os.sep) or "."
    return os.path.dirname(path) or "."


def _target(a: argparse.Namespace, src: str, src_eval_name: str | None = None) -> tuple[str, str]:
    if a.eval_name:
        return a.output_dir or _source_output_dir(src, src_eval_name), a.eval_name
    name = f"{os.path.basename(os.path.normpath(src))}@rejudge-{_slug(a.judge_model)}"
    return a.output_dir or os.path.dirname(os.path.normpath(src)) or ".", name


async def _run(
    a: argparse.Namespace,
    samples: list[Sample],
    records: StoredRecords,
    card: JSONObject,
    cfg: RunConfig,
    costs: CostModel | None,
) -> JSONObject:
    from ..endpoints.client import make_client
    from ..endpoints.endpoint import Endpoint
    from ..endpoints.guard import RunGuard
    from ..endpoints.rate_limit import AdaptiveLimiter
    from ..evaluation.judge import AnswerJudge, JudgeCache
    from ..evaluation.run_card import card_invocation, fixed_settings
    from ..evaluation.runner import run_evaluation
    from ..evaluation.stored_attempts import StoredAttempts

    guard = RunGuard(cfg.controls.max_failure_ratio)
    endpoint = Endpoint(
        base_url=a.judge_api_base_url, api_key=a.judge_api_key, timeout=a.client_timeout, max_retries=a.max_retries
    )
    n = cfg.controls.concurrency
    client = make_client(
        endpoint, role="judge", max_connections=max(n * 2, 16), guard=guard, limiter=AdaptiveLimiter(n)
    )
    try:
        judge = AnswerJudge(
            client,
            a.judge_model,
            a.max_answer_length,
            flow=a.judge_flow,
            cache=None if a.no_judge_cache else JudgeCache(),
            retries=a.judge_retries,
        )
        new_card = dict(card)
        new_card["judge"] = {
            "model": a.judge_model,
            "flow": a.judge_flow,
            "max_answer_length": a.max_answer_length,
            "cache": not a.no_judge_cache,
        }
        new_card["rejudged_from"] = os.path.abspath(a.eval_dir)
        settings = {k: v for k, v in vars(a).items() if k != "judge_api_key"}
        # the source's own fixed settings are this run's too: another source into the same dir is refused
        inv = card_invocation("rejudge", settings, flag_kinds(build_parser()), new_card, source=fixed_settings(card))
        return await run_evaluation(
            samples,
            StoredAttempts(records),
            judge,
            cfg,
            settings,
            guard=guard,
            run_card=new_card,
            invocation=inv,
            endpoints=[("judge", endpoint)],
            costs=costs,
        )
    finally:
        await client.close()


def _source_settings(a: argparse.Namespace, card: dict) -> CostModel | None:
    """Fill the judge settings ``a`` leaves open from the source run's card; the price model (or None)."""
    from ..endpoints.usage import CostModel
    from ..protocol.statuses import JudgeFlow

    src_settings = card.get("settings") or {}
    src_judge = card.get("judge") or {}
    a.judge_flow = a.judge_flow or src_judge.get("flow") or src_settings.get("judge_flow") or JudgeFlow.EXTRACT
    if a.max_answer_length is None:
        a.max_answer_length = src_judge.get("max_answer_length") or src_settings.get("max_answer_length") or 1000
    models = {
        "model": src_settings.get("model"),
        "judge": a.judge_model,
        "vsearcher": src_settings.get("vsearcher_model"),
    }
    return CostModel.from_file(a.price_file, models)


def _run_config(a: argparse.Namespace, num_trials: int, card: dict) -> RunConfig:
    from ..evaluation.runner import RunConfig

    output_dir, eval_name = _target(a, a.eval_dir, (card.get("settings") or {}).get("eval_name"))
    if os.path.abspath(os.path.join(output_dir, eval_name)) == os.path.abspath(a.eval_dir):
        raise SourceError("the re-judged run must go to a new eval dir (choose another --eval_name)")
    return RunConfig(
        output_dir=output_dir,
        eval_name=eval_name,
        num_trials=num_trials,
        retry_failed=a.retry_failed,
        controls=run_controls(a),
    )


def _report(a: argparse.Namespace, cfg: RunConfig, summary: dict) -> int:
    from ..evaluation.runner import failed_count

    acc = summary.get("overall_accuracy", {})
    print(
        f"{cfg.eval_dir}: accuracy {acc.get('mean', 0):.4f} ± {acc.get('std', 0):.4f} over "
        f"{summary['num_trials']} trial(s) (judge {a.judge_model})"
    )
    failed = failed_count(summary)
    if failed:
        print(
            f"{failed} sample-trial(s) could not be judged (status 'failed'); rerun with --retry_failed",
            file=sys.stderr,
        )
        return ExitCode.INCOMPLETE
    return ExitCode.OK


@entry_point
def main(argv: list[str] | None = None) -> int:
    setup_logging()
    p = build_parser()
    a = p.parse_args(argv)
    from ..evaluation.run_dir import RunDirError
    from ..storage.record_log import RecordFileError

    judges = _per_judge(p, a)
    try:
        source = load_source(a.eval_dir)
    except (SourceError, RecordFileError, RunDirError) as e:
        print(f"error: {e}", file=sys.stderr)
        return ExitCode.BAD_INPUT
    codes, dirs = [], []
    for aj in judges:
        rc, eval_dir = _rejudge(aj, *source)
        if rc not in (ExitCode.OK, ExitCode.INCOMPLETE):
            return rc
        codes.append(rc)
        dirs.append(eval_dir)
    _agreement(a, judges, dirs)
    return max(codes)


def _rejudge(a: argparse.Namespace, samples: list[Sample], records: StoredRecords, card: JSONObject) -> tuple[int, str]:
    """Re-judge the source with one judge (``a.judge_model``); its exit code and eval dir."""
    from ..base.redaction import redact
    from ..endpoints.usage import PriceError
    from ..evaluation.run_dir import RunDirError
    from ..jobs.integrity import SettingsChanged
    from ..storage.atomic import UnusableOutputDir
    from ..storage.record_log import RecordFileError

    try:
        costs = _source_settings(a, card)
        cfg = _run_config(a, len(records), card)
    except (SourceError, PriceError) as e:
        print(f"error: {e}", file=sys.stderr)
        return ExitCode.BAD_INPUT, ""
    log.info(
        "re-judging %d samples x %d trial(s) of %s with %s (%s flow) into %s",
        len(samples),
        len(records),
        a.eval_dir,
        a.judge_model,
        a.judge_flow,
        cfg.eval_dir,
    )
    try:
        summary = asyncio.run(_run(a, samples, records, card, cfg, costs))
    except (RecordFileError, RunDirError, SettingsChanged, UnusableOutputDir) as e:
        print(f"error: {redact(str(e))}", file=sys.stderr)
        return ExitCode.BAD_INPUT, cfg.eval_dir
    except stop_errors() as e:
        return report_stop(e, results=cfg.eval_dir), cfg.eval_dir
    return _report(a, cfg, summary), cfg.eval_dir


if __name__ == "__main__":
    sys.exit(main())
