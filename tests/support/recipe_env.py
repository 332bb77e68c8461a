"""The environment of the recipe's shell entry points (``verl/recipe/vsearch/train.sh``, ``val.sh``) in a test."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tests.support.stacks import REPO

#: The API key a run is given (no file, log or Ray record may hold it).
SECRET = "sk-test-must-not-appear-0123456789"


def script_env(tmp_path, **extra) -> dict:
    """The environment ``train.sh`` / ``val.sh`` read, as a dry run (``DRY_RUN=1``) with files under ``tmp_path``,
    the key :data:`SECRET` and ``extra`` on top."""
    env = dict(os.environ)
    env.update(
        VERL_PROJ_DIR=str(REPO / "verl"),
        MODEL_PATH="Qwen/Qwen2.5-VL-7B-Instruct",
        WORK_DIR=str(tmp_path / "work"),
        PROJECT_NAME="proj",
        EXP_NAME="exp",
        API_MODEL_FOR_AGENT="gpt-5-mini",
        JUDGE_MODEL="gpt-5-nano",
        OPENAI_BASE_URL="http://127.0.0.1:9/v1",
        OPENAI_API_KEY=SECRET,
        TRAIN_FILES="[/d/a.parquet,/d/b.parquet]",
        VAL_FILES="/d/v.parquet",
        PYTHON=sys.executable,
        DRY_RUN="1",
    )
    env.pop("RESUME_FROM_STEP", None)
    env.update(extra)
    return env


def entry_point_recorder(tmp_path: Path) -> tuple[Path, Path]:
    """A ``PYTHON`` for ``train.sh`` / ``val.sh`` that runs nothing and records the arguments the script gives the
    recipe's entry point (``-m recipe.vsearch.main ...``, one a line): what the shell part decides, without the
    ~10 CPU s of a dry run's two Python starts. Returns (the executable, its log; none until a script runs it)."""
    log = tmp_path / "entry_point.argv"
    log.unlink(missing_ok=True)
    rec = tmp_path / "python"
    rec.write_text(f'#!/usr/bin/env bash\nif [[ "$2" == recipe.vsearch.main ]]; then printf "%s\\n" "$@" > {log}; fi\n')
    rec.chmod(0o755)
    return rec, log


#: a command of :func:`run_at_once`: its argv, environment and working directory
Command = tuple[Sequence[str], Mapping[str, str], Path]


def run_at_once(
    commands: Mapping[str, Command], out_dir: Path, timeout: float = 240
) -> dict[str, subprocess.CompletedProcess]:
    """Start every command of ``commands`` (name -> :data:`Command`), then wait for each: independent dry runs
    that one after the other keep one of the 2 cores idle. Output goes to files under ``out_dir``, not pipes, so
    that no process waits on a full pipe while another is read. Returns name -> its ``CompletedProcess``."""
    started = {}
    for name, (argv, env, cwd) in commands.items():
        out, err = open(out_dir / f"{name}.stdout", "w"), open(out_dir / f"{name}.stderr", "w")
        started[name] = (subprocess.Popen(list(argv), cwd=cwd, env=dict(env), stdout=out, stderr=err), out, err)
    done = {}
    for name, (proc, out, err) in started.items():
        try:
            rc = proc.wait(timeout=timeout)
        finally:
            out.close()
            err.close()
        stdout, stderr = (out_dir / f"{name}.stdout").read_text(), (out_dir / f"{name}.stderr").read_text()
        done[name] = subprocess.CompletedProcess(proc.args, rc, stdout, stderr)
    return done


#: how ``train.sh`` / ``val.sh`` start the entry point under ``DRY_RUN=1``, before the overrides
DRY_RUN_ENTRY = ("-m", "recipe.vsearch.main", "--cfg", "job", "--resolve")


def compose_dry_run(args: Sequence[str]) -> Any:
    """The config a dry run given these entry-point arguments (as :func:`entry_point_recorder` logs them) prints: the
    recipe YAML composed with the overrides by Hydra (its compose API, the composition ``--cfg job`` runs) and
    resolved (``--resolve``), in this process."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    import recipe.vsearch.settings  # noqa: F401  (registers the recipe's resolver)

    assert tuple(args[: len(DRY_RUN_ENTRY)]) == DRY_RUN_ENTRY, args
    with initialize_config_dir(config_dir=str(REPO / "verl" / "recipe" / "vsearch" / "config"), version_base=None):
        cfg = compose(config_name="qwen_2_5_vl_7b_async", overrides=list(args[len(DRY_RUN_ENTRY) :]))
    OmegaConf.resolve(cfg)
    return cfg
