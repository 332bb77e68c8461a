"""Iterative DPO of the reasoning agent, round after round, under one work directory (the seed text's "Generate →
Evaluate → Train → Repeat"; docs/fidelity.md rows IVP14-IVP15).

Round ``r`` (1, 2, …) starts from the policy of round ``r - 1`` (round 1: ``base_model``) and runs five stages:

=========  ==========================================================================================================
generate   serve the policy with vLLM (``scripts/vllm_serve_bg.sh``, as ``policy-round-<r>``) and run the data
           engine's ``generate`` against it (N chains per question; seed ``generate.seed + r - 1``); stop the server
check      tier 1: the judge checks each chain's final answer (``insight_o3.reasoning_data.engine.check``)
score      tier 2: the scorer rates each chain that passed, 1-100
export     rank the chains; ``dpo_pairs.jsonl`` (best kept vs. worst rejected chain per question)
train      DPO from the policy on those pairs (``python -m training.dpo.train`` behind ``launcher``: accelerate +
           DeepSpeed ZeRO-3 on a GPU node); its export is the next round's policy
=========  ==========================================================================================================

::

    <work>/rounds_card.json       the settings the first run fixed (a later run that differs is refused, nothing
                                  written), each run's history; ``rounds`` may grow, not shrink below those done
    <work>/round_<r>/round.json   the round's policy, each finished stage's summary, the training metrics
    <work>/round_<r>/data/        the data engine's work directory (its steps, records, cards, export/)
    <work>/round_<r>/vllm/        the server's log and pid file
    <work>/round_<r>/train/       the trainer's checkpoints, metrics.jsonl, train.log
    <work>/round_<r>/model/       the trained policy (complete once there: written beside it, then renamed)

A killed run resumes where it stopped: finished stages are skipped (``round.json``), an unfinished engine step
resumes from its records (nothing asked twice), training from its last complete checkpoint. A stage that leaves
failed items (lost requests) stops the run with status 1: run it again to retry them.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shlex
import subprocess
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from insight_o3 import __version__
from insight_o3.base.exit_codes import ExitCode
from insight_o3.base.json_types import JSONObject
from insight_o3.base.setting_kinds import Kind, field_kinds, kind_field
from insight_o3.endpoints.endpoint import Endpoint
from insight_o3.endpoints.guard import RunStopped
from insight_o3.jobs.integrity import FewerThanHeld, Invocation, SettingsChanged, read_card, settle, sha256_file
from insight_o3.protocol.sample import AnnotationError
from insight_o3.reasoning_data import engine
from insight_o3.reasoning_data.settings import (
    CheckSettings,
    ExportSettings,
    GenerateSettings,
    ModelAccess,
    RunControls,
    ScoreSettings,
    controls_settings,
)
from insight_o3.reasoning_data.steps import read_records
from insight_o3.reasoning_data.workspace import EngineInputError, WorkDir
from insight_o3.storage.atomic import write_json_atomic
from insight_o3.storage.lock import RunLockedError, run_lock

from .pairs import PairsError, read_pairs
from .serve import ServeError, ServeSettings, served
from .settings import DPOSettings, SettingsError
from .train import EXPORT_CARD, METRICS_FILE

STAGES = ("generate", "check", "score", "export", "train")
CARD = "rounds_card.json"
ROUND_FILE = "round.json"
COMMAND = "training.dpo.rounds"
ROOT = Path(__file__).resolve().parents[2]
#: the trainer under accelerate + DeepSpeed ZeRO-3 on one 8-GPU node (the release's layout, row IVP4)
DEFAULT_LAUNCHER = ("accelerate", "launch", "--config_file", str(ROOT / "training/dpo/configs/accelerate_zero3.yaml"))


class RoundStopped(RuntimeError):
    """A stage could not finish (the message names the round, the stage and what to do); ``code`` is the exit
    status."""

    def __init__(self, message: str, code: ExitCode = ExitCode.INCOMPLETE) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, kw_only=True)
class RoundsConfig:
    """One iterative-DPO run: what it trains from and on, how many rounds, each stage's settings, where it runs."""

    work: str
    base_model: str = kind_field(Kind.RESULT)
    #: paths (what the annotation file holds is fixed through ``ann_sha256``)
    ann_file: str = kind_field(Kind.OPERATIONAL)
    img_dir: str = kind_field(Kind.OPERATIONAL)
    #: its settings under ``judge_`` (:meth:`ModelAccess.kinds`)
    judge: ModelAccess
    #: its settings under ``scorer_``
    scorer: ModelAccess
    #: more rounds continue the run; fewer than it finished are refused
    rounds: int = kind_field(Kind.EXTENT, default=3)
    generate: GenerateSettings = kind_field(Kind.RESULT, setting="generate_settings", default_factory=GenerateSettings)
    check: CheckSettings = kind_field(Kind.RESULT, setting="check_settings", default_factory=CheckSettings)
    score: ScoreSettings = kind_field(Kind.RESULT, setting="score_settings", default_factory=ScoreSettings)
    export: ExportSettings = kind_field(Kind.RESULT, setting="export_settings", default_factory=ExportSettings)
    dpo: DPOSettings = kind_field(Kind.RESULT, setting="dpo_settings", default_factory=DPOSettings)
    #: its fields' kinds are its own (none fixed by the first run)
    run: RunControls = field(default_factory=RunControls)
    #: how the policy is served, never what it is
    serve: ServeSettings = kind_field(Kind.OPERATIONAL, default_factory=ServeSettings)
    #: the command before ``-m training.dpo.train`` (``python``, ``accelerate launch --config_file …``)
    launcher: tuple[str, ...] = kind_field(Kind.OPERATIONAL, default=DEFAULT_LAUNCHER)
    #: train on the CPU (fp32 on the CPU vs bf16 on GPUs; tests)
    cpu: bool = kind_field(Kind.RESULT, setting="train_on_cpu", default=False)
    #: evaluate the round's pairs every this many steps during training (a fixed batch: eval_loss, eval_rewards/*)
    eval_steps: int | None = kind_field(Kind.OPERATIONAL, default=None)
    #: the key of the served policy (vLLM's ``VLLM_API_KEY``), never written
    policy_api_key: str | None = kind_field(Kind.SECRET, default=None, repr=False)

    def __post_init__(self) -> None:
        if self.rounds < 1:
            raise ValueError(f"rounds must be at least 1, got {self.rounds}")
        if not self.launcher:
            raise ValueError("launcher must name a command")

    def settings(self) -> JSONObject:
        """Every setting by its name (the run-integrity kind of each: :meth:`kinds`)."""
        return {
            "base_model": os.path.abspath(self.base_model),
            "ann_file": self.ann_file,
            "img_dir": self.img_dir,
            "rounds": self.rounds,
            **self.judge.settings("judge_"),
            **self.scorer.settings("scorer_"),
            "generate_settings": self.generate.settings(),
            "check_settings": self.check.settings(),
            "score_settings": self.score.settings(),
            "export_settings": self.export.settings(),
            "dpo_settings": self.dpo.settings(),
            **controls_settings(self.run),
            "serve": self.serve.settings(),
            "launcher": list(self.launcher),
            "eval_steps": self.eval_steps,
            "train_on_cpu": self.cpu,
        }

    @staticmethod
    def kinds() -> dict[str, Kind]:
        """The run-integrity kind of each of :meth:`settings`, as its fields declare them."""
        return {
            **field_kinds(RoundsConfig),
            **ModelAccess.kinds("judge_"),
            **ModelAccess.kinds("scorer_"),
            **field_kinds(RunControls),
        }


@dataclass(frozen=True)
class RoundDir:
    root: Path
    number: int

    @classmethod
    def of(cls, work: str | os.PathLike, number: int) -> RoundDir:
        return cls(Path(work) / f"round_{number}", number)

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def train(self) -> Path:
        return self.root / "train"

    @property
    def model(self) -> Path:
        return self.root / "model"

    @property
    def vllm(self) -> Path:
        return self.root / "vllm"

    @property
    def record(self) -> Path:
        return self.root / ROUND_FILE

    @property
    def pairs(self) -> Path:
        return self.data / "export" / "dpo_pairs.jsonl"

    def read(self) -> JSONObject:
        return read_card(str(self.record)) or {}

    def finished(self) -> bool:
        return self.read().get("status") == "done" and (self.model / EXPORT_CARD).is_file()


def policy_of(cfg: RoundsConfig, number: int) -> str:
    """The policy round ``number`` starts from: the base model, or the previous round's export."""
    return os.path.abspath(cfg.base_model) if number == 1 else str(RoundDir.of(cfg.work, number - 1).model)


def served_name(number: int) -> str:
    return f"policy-round-{number}"


def failure_reasons(r: RoundDir, stage: str, most: int = 3) -> str:
    """The commonest errors of a stage's failed items (``" (9x timeout; ...)"``), or ``""`` when none can be read:
    a stop that says why, without opening the records."""
    try:
        records = read_records(WorkDir.at(r.data).records(stage), stage)
    except (EngineInputError, OSError):
        return ""
    errors = Counter(
        " ".join(str(rec.get("error") or "no error recorded").split())[:300]
        for rec in records.values()
        if rec.get("status") == "failed"
    )
    return f" ({'; '.join(f'{n}x {e}' for e, n in errors.most_common(most))})" if errors else ""


def _incomplete(stage: str, r: RoundDir, incomplete: int) -> RoundStopped:
    reasons = failure_reasons(r, stage)
    return RoundStopped(f"round {r.number}: {stage} left {incomplete} item(s) failed{reasons}; run again to retry them")


def _generate(cfg: RoundsConfig, r: RoundDir, policy: str) -> JSONObject:
    settings = dataclasses.replace(cfg.generate, seed=cfg.generate.seed + r.number - 1)
    with served(policy, served_name(r.number), cfg.serve, str(r.vllm)) as url:
        generator = ModelAccess(
            model=served_name(r.number), api=Endpoint(base_url=url, api_key=cfg.policy_api_key or "EMPTY")
        )
        result = engine.generate(str(r.data), cfg.ann_file, cfg.img_dir, generator, settings, cfg.run)
    if result.incomplete:
        raise _incomplete("generate", r, result.incomplete)
    return {"summary": result.summary, "seed": settings.seed}


def _check(cfg: RoundsConfig, r: RoundDir) -> JSONObject:
    result = engine.check(str(r.data), cfg.judge, cfg.check, cfg.run)
    if result.incomplete:
        raise _incomplete("check", r, result.incomplete)
    return {"summary": result.summary}


def _score(cfg: RoundsConfig, r: RoundDir) -> JSONObject:
    result = engine.score(str(r.data), cfg.scorer, cfg.score, cfg.run)
    if result.incomplete:
        raise _incomplete("score", r, result.incomplete)
    return {"summary": result.summary}


def _export(cfg: RoundsConfig, r: RoundDir) -> JSONObject:
    result = engine.export(str(r.data), cfg.export)
    pairs = int(result.counts.get("dpo_pairs") or 0)
    if pairs == 0:
        raise RoundStopped(
            f"round {r.number}: the assessment kept no chosen/rejected pair ({json.dumps(result.counts)}); "
            "more chains per question (num_chains) or questions give the ranking something to pair",
            ExitCode.BAD_INPUT,
        )
    return {"counts": result.counts, "pairs": str(r.pairs)}


def train_command(cfg: RoundsConfig, r: RoundDir, policy: str, settings_file: Path) -> list[str]:
    cmd = [*cfg.launcher, "-m", "training.dpo.train", "--model", policy, "--pairs", str(r.pairs)]
    cmd += ["--output_dir", str(r.train), "--export_dir", str(r.model), "--settings", str(settings_file)]
    if cfg.eval_steps:
        cmd += ["--eval_pairs", str(r.pairs), "--eval_steps", str(cfg.eval_steps)]
    if cfg.cpu:
        cmd.append("--cpu")
    return cmd


def metrics_summary(path: Path) -> JSONObject:
    """The first and last value of the training metrics that show DPO learning (and the fixed batch's, if
    evaluated)."""
    rows = (
        [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        if path.exists()
        else []
    )
    out: JSONObject = {"steps": max((int(r.get("step", 0)) for r in rows), default=0)}
    for key in ("loss", "rewards/margins", "rewards/accuracies", "eval_loss", "eval_rewards/margins"):
        values = [r[key] for r in rows if isinstance(r.get(key), (int, float))]
        if values:
            out[key] = {"first": values[0], "last": values[-1], "n": len(values)}
    return out


def _train(cfg: RoundsConfig, r: RoundDir, policy: str) -> JSONObject:
    if not (r.model / EXPORT_CARD).is_file():
        read_pairs(r.pairs)  # a bad row stops here, named, before a GPU job starts
        r.train.mkdir(parents=True, exist_ok=True)
        settings_file = r.root / "dpo_settings.json"
        write_json_atomic(settings_file, cfg.dpo.settings())
        cmd = train_command(cfg, r, policy, settings_file)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
        with open(r.train / "train.log", "ab") as log:
            log.write(f"\n$ {shlex.join(cmd)}\n".encode())
            log.flush()
            done = subprocess.run(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        if done.returncode != 0:
            code = ExitCode.BAD_INPUT if done.returncode == ExitCode.BAD_INPUT else ExitCode.INCOMPLETE
            raise RoundStopped(
                f"round {r.number}: training exited with status {done.returncode} (log: {r.train / 'train.log'}); "
                "run again to resume from its last checkpoint",
                code,
            )
    export = read_card(str(r.model / EXPORT_CARD)) or {}
    return {
        "model": str(r.model),
        "global_step": export.get("global_step"),
        "metrics": metrics_summary(r.train / METRICS_FILE),
    }


def run_round(cfg: RoundsConfig, number: int) -> JSONObject:
    """Round ``number`` from where it stopped; its ``round.json``."""
    r = RoundDir.of(cfg.work, number)
    r.root.mkdir(parents=True, exist_ok=True)
    policy = policy_of(cfg, number)
    record = r.read() or {"round": number, "policy": policy, "stages": {}, "status": "running"}
    stages: dict[str, Any] = dict(record.get("stages") or {})
    for stage in STAGES:
        if stage in stages:
            continue
        print(f"[dpo rounds] round {number}: {stage}", file=sys.stderr, flush=True)
        if stage == "generate":
            stages[stage] = _generate(cfg, r, policy)
        elif stage == "check":
            stages[stage] = _check(cfg, r)
        elif stage == "score":
            stages[stage] = _score(cfg, r)
        elif stage == "export":
            stages[stage] = _export(cfg, r)
        else:
            stages[stage] = _train(cfg, r, policy)
        record = {**record, "stages": stages}
        write_json_atomic(r.record, record)
    record = {**record, "status": "done"}
    write_json_atomic(r.record, record)
    return record


def _rounds_done(work: str) -> int:
    n = 0
    while RoundDir.of(work, n + 1).finished():
        n += 1
    return n


def run(cfg: RoundsConfig) -> list[JSONObject]:
    """Every round up to ``cfg.rounds``, resuming; the rounds' records. Raises :class:`RoundStopped`,
    :class:`~insight_o3.jobs.integrity.SettingsChanged`, :class:`~insight_o3.storage.lock.RunLockedError`."""
    os.makedirs(cfg.work, exist_ok=True)
    with run_lock(cfg.work, COMMAND):
        card_path = Path(cfg.work) / CARD
        invocation = Invocation(
            COMMAND,
            cfg.settings(),
            {"ann_sha256": sha256_file(cfg.ann_file)},
            {"version": __version__},
            cfg.kinds(),
        )
        done = _rounds_done(cfg.work)
        card = settle(
            read_card(str(card_path)),
            {"layout": "round_<r>/{data,vllm,train,model}, round_<r>/round.json"},
            invocation,
            where=str(card_path),
            hint="use another work directory to run with other settings",
            held={"rounds": done},
        )
        write_json_atomic(card_path, card)
        return [run_round(cfg, n) for n in range(1, cfg.rounds + 1)]


# ------------------------------------------------------------------------------------------------ command line
def build_parser() -> argparse.ArgumentParser:
    d, g, e = DPOSettings(), GenerateSettings(), ExportSettings()
    p = argparse.ArgumentParser(
        prog="python -m training.dpo.rounds", description=__doc__.split("\n\n")[0], allow_abbrev=False
    )
    p.add_argument("--work", required=True, help="the run's work directory (every round under it)")
    p.add_argument("--base_model", required=True, help="the reasoning agent to start from (a Qwen2.5-VL checkpoint)")
    p.add_argument("--ann_file", required=True, help="the training questions (the benchmark annotation format)")
    p.add_argument("--img_dir", required=True, help="directory the annotation's image paths are relative to")
    p.add_argument("--rounds", type=int, default=3, help="rounds of generate → assess → DPO (default 3)")
    p.add_argument("--num_chains", type=int, default=g.num_chains, help="chains per question and round")
    p.add_argument("--seed", type=int, default=g.seed, help="the generation seed of round 1 (round r: seed + r - 1)")
    p.add_argument("--generation_kwargs", default="{}", help="JSON over the release's sampling (e.g. max_tokens)")
    p.add_argument("--judge_model", required=True, help="tier 1: the LLM that checks final answers")
    p.add_argument("--judge_api_base_url", help="default: $JUDGE_API_BASE_URL, then $OPENAI_BASE_URL")
    p.add_argument("--scorer_model", required=True, help="tier 2: the MLLM that scores chains 1-100")
    p.add_argument("--scorer_api_base_url", help="default: $OPENAI_BASE_URL")
    p.add_argument("--min_score", type=int, default=e.min_score, help="tier 2's bar for a kept chain")
    p.add_argument("--pairs_per_question", type=int, default=e.pairs_per_question)
    p.add_argument("--dpo_min_margin", type=int, default=e.dpo_min_margin)
    p.add_argument("--dpo_settings", help=f"JSON file of DPO settings over the release's (lr {d.learning_rate}, ...)")
    p.add_argument("--launcher", default=shlex.join(DEFAULT_LAUNCHER), help="the command before -m training.dpo.train")
    p.add_argument("--cpu", action="store_true", help="serve with vLLM's CPU build and train on the CPU (tests)")
    p.add_argument("--eval_steps", type=int, help="evaluate the round's pairs every N training steps")
    p.add_argument(
        "--port", type=int, default=8000, help="the policy server's port (0: a free one, picked as each server starts)"
    )
    p.add_argument("--max_model_len", type=int, default=16384, help="the policy server's context")
    p.add_argument("--vllm_args", default="", help="extra vLLM flags for the policy server (one string)")
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--no_progress", action="store_true")
    return p


def _env(*names: str) -> str | None:
    return next((os.environ[n] for n in names if os.environ.get(n)), None)


def config_from_args(a: argparse.Namespace) -> RoundsConfig:
    """The run's frozen config from parsed flags; keys from the environment only (``JUDGE_API_KEY``,
    ``OPENAI_API_KEY``, ``VLLM_API_KEY``)."""
    try:
        kwargs = json.loads(a.generation_kwargs)
    except json.JSONDecodeError as err:
        raise SettingsError(f"--generation_kwargs is not JSON: {err}") from None
    if not isinstance(kwargs, dict):
        raise SettingsError("--generation_kwargs must be a JSON object")
    judge = ModelAccess(
        model=a.judge_model,
        api=Endpoint(
            base_url=a.judge_api_base_url or _env("JUDGE_API_BASE_URL", "JUDGE_BASE_URL", "OPENAI_BASE_URL"),
            api_key=_env("JUDGE_API_KEY", "OPENAI_API_KEY") or "EMPTY",
        ),
    )
    scorer = ModelAccess(
        model=a.scorer_model,
        api=Endpoint(
            base_url=a.scorer_api_base_url or _env("OPENAI_BASE_URL"), api_key=_env("OPENAI_API_KEY") or "EMPTY"
        ),
    )
    return RoundsConfig(
        work=a.work,
        base_model=a.base_model,
        ann_file=a.ann_file,
        img_dir=a.img_dir,
        judge=judge,
        scorer=scorer,
        rounds=a.rounds,
        generate=GenerateSettings(num_chains=a.num_chains, seed=a.seed, completion_kwargs=kwargs),
        export=ExportSettings(
            min_score=a.min_score, pairs_per_question=a.pairs_per_question, dpo_min_margin=a.dpo_min_margin
        ),
        dpo=DPOSettings.from_file(a.dpo_settings) if a.dpo_settings else DPOSettings(),
        run=RunControls(concurrency=a.concurrency, progress=not a.no_progress),
        serve=ServeSettings(
            port=a.port, max_model_len=a.max_model_len, cpu=a.cpu, vllm_args=tuple(shlex.split(a.vllm_args))
        ),
        launcher=tuple(shlex.split(a.launcher)),
        cpu=a.cpu,
        eval_steps=a.eval_steps,
        policy_api_key=_env("VLLM_API_KEY"),
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        records = run(config_from_args(args))
    except (
        SettingsError,
        SettingsChanged,
        FewerThanHeld,
        PairsError,
        AnnotationError,
        EngineInputError,
        ValueError,
    ) as e:
        print(f"error: {e}", file=sys.stderr)
        return int(ExitCode.BAD_INPUT)
    except RunLockedError as e:
        print(f"error: {e}", file=sys.stderr)
        return int(ExitCode.LOCKED)
    except RunStopped as e:
        print(f"stopped: {e}", file=sys.stderr)
        return int(ExitCode.STOPPED)
    except ServeError as e:
        print(f"error: {e}", file=sys.stderr)
        return int(ExitCode.INCOMPLETE)
    except RoundStopped as e:
        print(f"stopped: {e}", file=sys.stderr)
        return int(e.code)
    for rec in records:
        train = rec["stages"]["train"]
        print(
            f"round {rec['round']}: {rec['stages']['export']['counts'].get('dpo_pairs')} pairs, model {train['model']}"
        )
    return int(ExitCode.OK)


if __name__ == "__main__":
    raise SystemExit(main())
