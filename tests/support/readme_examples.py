"""The code examples of README.md and data/README.md, and a sandbox that runs them as written.

Every fenced ``bash`` or ``python`` block in those files is preceded by a marker line saying whether CI runs it:

    <!-- example: run -->
    <!-- example: not run (needs a GPU and the Hub model m-Just/InSight-o3-vS) -->

:func:`examples` reads the blocks with their markers. :class:`Sandbox` is a repository-like directory (``data/``,
``outputs/``, the repository's ``scripts/`` and ``notebooks/``) with O3-Bench's layout filled by a small demo
benchmark, a price file, and the keyless demo's scripted model, vSearcher and judge
(:mod:`insight_o3.demo.endpoints`) on 127.0.0.1, named by the variables the examples use (``$MODEL``,
``$API_BASE_URL``, ``OPENAI_BASE_URL``, ``JUDGE_API_BASE_URL``, ...). :meth:`Sandbox.run` runs one block with
``bash -euo pipefail`` (``python`` for Python blocks) from the sandbox's root, with this checkout's library and
this interpreter as ``python``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from insight_o3.demo.endpoints import DemoScripts
from insight_o3.endpoints.scripted_server import ScriptedOpenAIServer
from insight_o3.scripts import make_demo_bench

REPO = Path(__file__).resolve().parents[2]
FILES = ("README.md", "data/README.md")
#: fences whose blocks are examples (each needs a marker); other fences (json, trees, decisions files) are data
LANGS = {"bash": "bash", "sh": "bash", "shell": "bash", "console": "bash", "python": "python"}
_FENCE = re.compile(r"^\s*```\s*([\w+-]*)\s*$")
_MARKER = re.compile(r"^\s*<!--\s*example:\s*(?:(?P<run>run)|not run \((?P<why>[^)]*\S[^)]*)\))\s*-->\s*$")
_ANY_MARKER = re.compile(r"^\s*<!--\s*example:")
#: the sandbox's model name: the README's analysis examples name the model of the evaluate example (gpt-5-mini)
MODEL = "gpt-5-mini"


@dataclass(frozen=True)
class Example:
    file: str  # relative to the repository root
    line: int  # 1-based line of the opening fence
    lang: str  # "bash" or "python"
    code: str
    run: bool
    why: str | None  # the marker's reason when not run; None: no marker (an error)
    marked: bool

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


def examples(path: Path, name: str) -> tuple[list[Example], list[str]]:
    """The example blocks of one Markdown file, and its problems (a malformed or dangling marker)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found: list[Example] = []
    problems: list[str] = []
    used: set[int] = set()
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith("```"):
            j += 1
        lang = LANGS.get(m.group(1).lower())
        if lang is not None:
            marker = _MARKER.match(lines[i - 1]) if i > 0 else None
            if marker:
                used.add(i - 1)
            found.append(
                Example(
                    file=name,
                    line=i + 1,
                    lang=lang,
                    code="\n".join(lines[i + 1 : j]) + "\n",
                    run=bool(marker and marker.group("run")),
                    why=marker.group("why").strip() if marker and marker.group("why") else None,
                    marked=marker is not None,
                )
            )
        i = j + 1
    for k, line in enumerate(lines):
        if _ANY_MARKER.search(line) and k not in used:
            problems.append(
                f"{name}:{k + 1}: {line.strip()!r} is not a marker of the block right below it "
                "(write <!-- example: run --> or <!-- example: not run (REASON) --> on the line before the fence)"
            )
    return found, problems


def all_examples() -> tuple[list[Example], list[str]]:
    out: list[Example] = []
    problems: list[str] = []
    for name in FILES:
        found, bad = examples(REPO / name, name)
        out += found
        problems += bad
    return out, problems


@dataclass
class SandboxScripts(DemoScripts):
    """The demo's scripts over every demo benchmark in the sandbox: one an example draws (``make_demo_bench``)
    is read when its first question comes in. O3-Bench's ``metadata.jsonl`` has no ``question_id`` (data/README.md),
    so a row without one is named by its file and line."""

    root: Path = field(default_factory=Path)

    def reload(self) -> None:
        rows = []
        for meta in sorted(self.root.rglob("metadata.jsonl")):
            for n, line in enumerate(meta.read_text(encoding="utf-8").splitlines()):
                if line.strip():
                    row = json.loads(line)
                    row.setdefault("question_id", f"{meta.parent.name}-{n}")
                    rows.append(row)
        self.rows = rows

    def _row_in(self, text: str) -> dict | None:
        row = super()._row_in(text)
        if row is None:
            self.reload()
            row = super()._row_in(text)
        return row


class Sandbox:
    """A repository-like directory with O3-Bench's layout and the scripted endpoints; see the module docstring."""

    #: O3-Bench in the sandbox: enough questions for the README's ``--sample_ids``, small images
    BENCH_ARGS = ("--num_images", "8", "--num_questions", "48", "--min_side", "400", "--seed", "0")

    def __init__(self, root: Path):
        self.root = root
        (root / "data").mkdir(parents=True)
        for name in ("scripts", "verl", "pyproject.toml"):
            (root / name).symlink_to(REPO / name)
        # copied: a notebook finds the repository root from its kernel's directory, which a symlink would resolve
        shutil.copytree(REPO / "notebooks", root / "notebooks")
        (root / "data" / "prepare_benchmarks.py").symlink_to(REPO / "data" / "prepare_benchmarks.py")
        bench = root / "data" / "O3-Bench" / "test"
        assert make_demo_bench.main(["--output_dir", str(bench), *self.BENCH_ARGS]) == 0
        meta = bench / "metadata.jsonl"
        rows = [json.loads(line) for line in meta.read_text().splitlines() if line.strip()]
        meta.write_text("".join(json.dumps({k: v for k, v in r.items() if k != "question_id"}) + "\n" for r in rows))
        # the price file the README's budget example names (US$ per million tokens)
        prices = {MODEL: {"input": 0.25, "output": 2.0}, "gpt-5-nano": {"input": 0.05, "output": 0.4}}
        (root / "prices.yaml").write_text("".join(f"{m}: {json.dumps(p)}\n" for m, p in prices.items()))
        # `python` is this interpreter (the venv the tests run in), the library this checkout
        bin_dir = root / ".bin"
        bin_dir.mkdir()
        (bin_dir / "python").write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} \"$@\"\n")
        (bin_dir / "python").chmod(0o755)
        self.scripts = SandboxScripts([], root=root)
        self.scripts.reload()
        self.servers = {
            role: ScriptedOpenAIServer(script, keep_bodies=False).start()
            for role, script in (
                ("model", self.scripts.model),
                ("vsearcher", self.scripts.searcher),
                ("judge", self.scripts.judge),
            )
        }
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("OPENAI_", "JUDGE_", "VSEARCHER_", "INSIGHT_O3_")) and k != "PYTHONPATH"
        }
        model, searcher, judge = (self.servers[r].base_url for r in ("model", "vsearcher", "judge"))
        self.env = {
            **env,
            "PATH": f"{bin_dir}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
            "PYTHONPATH": str(REPO),
            "MODEL": MODEL,
            "API_BASE_URL": model,
            "OPENAI_BASE_URL": model,
            "OPENAI_API_KEY": "sk-scripted",
            "JUDGE_API_BASE_URL": judge,
            "JUDGE_API_KEY": "sk-scripted",
            "VSEARCHER_API_BASE_URL": searcher,
            "VSEARCHER_API_KEY": "sk-scripted",
        }

    def given(self, code: str) -> None:
        """State the examples assume (a run they compare), made with the same commands."""
        r = self.run_code("bash", code)
        assert r.returncode == 0, f"sandbox set-up failed:\n{code}\n{r.stdout[-3000:]}"

    def run_code(self, lang: str, code: str, timeout: float = 300) -> subprocess.CompletedProcess:
        argv = ["bash", "-euo", "pipefail", "-c", code] if lang == "bash" else ["python", "-c", code]
        return subprocess.run(
            argv,
            cwd=self.root,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            timeout=timeout,
        )

    def run(self, ex: Example) -> subprocess.CompletedProcess:
        return self.run_code(ex.lang, ex.code)

    def requests(self, role: str) -> int:
        return self.servers[role].count

    def close(self) -> None:
        for s in self.servers.values():
            s.stop()


# ------------------------------------------------------------------------------------------------ flags, statically
def commands(code: str) -> list[list[str]]:
    """The commands of a bash block as words (line continuations joined, comments dropped, split at ``&&``/``;``/
    ``|``); variables stay as written. Optional parts written ``[--flag V]`` lose their brackets."""
    out: list[list[str]] = []
    for line in code.replace("\\\n", " ").splitlines():
        words = [w.strip("[]") for w in shlex.split(line, comments=True)]
        cmd: list[str] = []
        for w in words:
            if w in ("&&", "||", ";", "|"):
                out.append(cmd)
                cmd = []
            elif w:
                cmd.append(w)
        out.append(cmd)
    return [c for c in out if c]


def _option_strings(parser: argparse.ArgumentParser, words: list[str]) -> set[str]:
    """The flags of ``parser``, descending into the sub-command ``words`` name (argparse sub-parsers)."""
    flags = {s for a in parser._actions for s in a.option_strings}
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            sub = next((w for w in words if w in a.choices), None)
            if sub is not None:
                return _option_strings(a.choices[sub], words[words.index(sub) + 1 :])
    return flags


def unknown_flags(cmd: list[str]) -> list[str]:
    """The ``--flags`` of a ``python -m insight_o3.scripts.NAME`` (or ``training.…``) or ``bash scripts/NAME.sh`` command that the command
    does not have (its argparse parser; a shell script's text); [] for other commands."""
    words = [w.split("=", 1)[0] for w in cmd]
    if len(cmd) > 2 and cmd[:2] == ["python", "-m"] and cmd[2].startswith(("insight_o3.scripts.", "training.")):
        mod = importlib.import_module(cmd[2])
        args = words[3:]
        if cmd[2].endswith(".generate_collages") and args and args[0] in ("pool", "filter"):
            known = _option_strings(mod.build_parser(args[0]), args[1:])
        else:
            known = _option_strings(mod.build_parser(), args)
        return [w for w in args if w.startswith("--") and w not in known]
    if cmd[0] == "bash" and len(cmd) > 1 and cmd[1].startswith("scripts/") and cmd[1].endswith(".sh"):
        text = (REPO / cmd[1]).read_text()
        args = words[2 : words.index("--")] if "--" in words else words[2:]  # after `--`: the server's own flags
        return [w for w in args if w.startswith("--") and w not in text]
    return []
