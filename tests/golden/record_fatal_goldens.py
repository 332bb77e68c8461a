"""Record the fatal-aware GRPO goldens by RUNNING OpenSearch-VL's released rule (tests/golden/README.md, "OpenSearch-VL
goldens"); compared by tests/protocol/test_fatal_golden.py.

    .venv/bin/python tests/golden/record_fatal_goldens.py --repo <git dir of shawn0728/OpenSearch-VL>

Two functions are cut out of their files at c5c02a4 with ``ast`` and executed as written (their modules import rLLM,
verl and the agent, which the rule does not use):

* ``RL/rllm/vision_deepresearch_async_workflow/deepresearch_workflow.py``: ``_find_fatal_step_index`` with
  ``_is_step_error``, ``_has_tool_error_observation`` and ``_CONSECUTIVE_ERROR_THRESHOLD`` (the fatal step of an
  episode from its steps' error flags and its termination);
* ``RL/rllm/rllm/engine/agent_workflow_engine.py``: ``_apply_fatal_step_mask`` (the response mask zeroed from the
  fatal step's first generated token on; a step is a run of 1s of the cumulative mask).

Stubbed: ``Step`` (an object with ``info`` and ``observation``, the two attributes ``_is_step_error`` reads). Real:
torch. Cases: every error-flag sequence of up to 7 steps under the terminations ``answer`` and ``max_turns``, an
error marked either way the rule reads (``info["step_error"]`` or an error marker in the observation), and 300
seeded random masks (1-blocks of 1-6 tokens, observation blocks of 1-5, with or without a trailing observation) with
every fatal index from 0 to one past the last step. Seeded: re-running on the same commit writes the same file.
"""

from __future__ import annotations

import argparse
import ast
import itertools
import json
import random
import subprocess
import types
from pathlib import Path
from typing import Any

COMMIT = "c5c02a4"
OUT = Path(__file__).resolve().parent / "opensearch_vl" / "fatal.json"
WORKFLOW = "RL/rllm/vision_deepresearch_async_workflow/deepresearch_workflow.py"
ENGINE = "RL/rllm/rllm/engine/agent_workflow_engine.py"


def cut(source: str, names: set[str]) -> str:
    """The top-level functions and assignments of ``source`` named in ``names``, as written."""
    tree = ast.parse(source)
    parts = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name in names:
            parts.append(ast.get_source_segment(source, node))
        elif isinstance(node, ast.Assign) and any(getattr(t, "id", None) in names for t in node.targets):
            parts.append(ast.get_source_segment(source, node))
    found = {n for n in names if any(f"def {n}(" in p or p.startswith(f"{n} =") for p in parts if p)}
    if found != names:
        raise SystemExit(f"not found in the release: {sorted(names - found)}")
    return "\n\n".join(p for p in parts if p)


def released(repo: str, commit: str) -> dict[str, Any]:
    import torch

    def show(path: str) -> str:
        return subprocess.run(
            ["git", "--git-dir", repo, "show", f"{commit}:{path}"], check=True, capture_output=True, text=True
        ).stdout

    ns: dict[str, Any] = {"Any": Any, "Step": object, "torch": torch}
    rule = {"_has_tool_error_observation", "_is_step_error", "_CONSECUTIVE_ERROR_THRESHOLD", "_find_fatal_step_index"}
    exec(compile(cut(show(WORKFLOW), rule), WORKFLOW, "exec"), ns)
    exec(compile(cut(show(ENGINE), {"_apply_fatal_step_mask"}), ENGINE, "exec"), ns)
    return ns


def step(error: bool, how: str) -> types.SimpleNamespace:
    """A released ``Step`` as ``_is_step_error`` reads it: an error flagged by the agent (``info``) or shown by the
    tool (an error marker in the observation)."""
    if not error:
        return types.SimpleNamespace(info={}, observation="<tool_response>3 results</tool_response>")
    if how == "flag":
        return types.SimpleNamespace(info={"step_error": True}, observation="")
    return types.SimpleNamespace(info={}, observation="Tool execution error: bbox out of range")


def fatal_cases(ns: dict[str, Any]) -> list[dict[str, Any]]:
    cases = []
    for n in range(8):
        for errors in itertools.product([False, True], repeat=n):
            for termination in ("answer", "max_turns"):
                how = "flag" if sum(errors) % 2 else "observation"
                index, reason = ns["_find_fatal_step_index"]([step(e, how) for e in errors], termination)
                cases.append(
                    {"errors": list(errors), "termination": termination, "released": [index, reason], "marked_by": how}
                )
    return cases


def mask_cases(ns: dict[str, Any]) -> list[dict[str, Any]]:
    import torch

    rnd = random.Random(47)
    cases = []
    for _ in range(300):
        n_steps = rnd.randint(1, 6)
        mask: list[int] = []
        starts = []
        for s in range(n_steps):
            starts.append(len(mask))
            mask += [1] * rnd.randint(1, 6)
            if s < n_steps - 1 or rnd.random() < 0.5:  # an observation between steps, sometimes after the last
                mask += [0] * rnd.randint(1, 5)
        for fatal in range(n_steps + 1):
            out = ns["_apply_fatal_step_mask"](torch.tensor(mask, dtype=torch.long), fatal)
            cases.append({"mask": mask, "step_starts": starts, "fatal": fatal, "released": out.tolist()})
    return cases


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    ap.add_argument("--repo", required=True, help="git dir of shawn0728/OpenSearch-VL")
    ap.add_argument("--commit", default=COMMIT)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    ns = released(args.repo, args.commit)
    data = {
        "source": f"shawn0728/OpenSearch-VL@{args.commit}: {WORKFLOW} (_find_fatal_step_index), {ENGINE} "
        "(_apply_fatal_step_mask); run by tests/golden/record_fatal_goldens.py",
        "threshold": ns["_CONSECUTIVE_ERROR_THRESHOLD"],
        "fatal_step": fatal_cases(ns),
        "mask": mask_cases(ns),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(data, separators=(",", ":")) + "\n")
    print(f"{args.out}: {len(data['fatal_step'])} fatal-step cases, {len(data['mask'])} mask cases")


if __name__ == "__main__":
    main()
