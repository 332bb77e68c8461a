"""The environment of the recipe's shell entry points (``verl/recipe/vsearch/train.sh``, ``val.sh``) in a test."""

from __future__ import annotations

import os
import sys

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
