"""The checks and the summary of the first-GPU acceptance kit (``scripts/gpu_acceptance.sh``).

Plain Python over the GPU stack (no pytest needed for these parts; the kit's unit checks are ``tests/gpu``):

* :func:`preflight`: the GPU, the pinned versions, one flash-attn varlen call against PyTorch's attention, a C compiler
  (Triton and Inductor compile kernels), pytest for the unit checks;
* :func:`metric_checks`: what ``smoke_gpu.sh``'s two runs must show in their metrics and logs (grad norm finite and
  non-zero, no old-log-prob pass, image inputs as references, memory logged, pixel-cache counters, the resume). The
  CPU driver test runs the same function on its own runs (``tests/recipe/test_driver_vllm.py``);
* :func:`summarize`: every check's line files -> one JSON (``acceptance.json``).

    python -m tests.support.gpu_acceptance preflight OUT.tsv
    python -m tests.support.gpu_acceptance metrics RUN_DIR OUT.tsv [--cpu]
    python -m tests.support.gpu_acceptance pytest-lines PYTEST_LOG OUT.tsv
    python -m tests.support.gpu_acceptance summary OUT.json LINES.tsv ...

A line file holds ``check<TAB>status<TAB>detail`` lines (status PASS, FAIL, SKIP or INFO), as ``smoke_gpu.sh`` writes.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import math
import shutil
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

#: the GPU stack the recipe pins (pyproject's ``train`` extra); flash-attn is reported, not pinned
EXPECTED = {"torch": "2.9.0", "vllm": "0.12.0", "verl": "0.7.0", "transformers": "4.57.3"}
STATUSES = ("PASS", "FAIL", "SKIP", "INFO")


@dataclass(frozen=True)
class Check:
    name: str
    status: str
    detail: str

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")

    def line(self) -> str:
        return f"{self.status} {self.name:<18} {self.detail}"

    def tsv(self) -> str:
        return f"{self.name}\t{self.status}\t{' '.join(self.detail.split())}\n"


# ----------------------------------------------------------------------------- preflight
def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def gpu_check() -> Check:
    try:
        import torch
    except ImportError as e:
        return Check("gpu", "FAIL", f"torch does not import: {e}")
    if not torch.cuda.is_available():
        return Check("gpu", "FAIL", "torch sees no CUDA device")
    props = torch.cuda.get_device_properties(0)
    return Check("gpu", "PASS", f"{torch.cuda.device_count()} x {props.name}, {props.total_memory / 2**30:.0f} GiB")


def versions_check(expected: dict[str, str] = EXPECTED) -> Check:
    found = {d: _version(d) for d in (*expected, "flash_attn")}
    wrong = {d: found[d] for d, v in expected.items() if (found[d] or "").split("+", 1)[0] != v}
    detail = ", ".join(f"{d} {v or 'missing'}" for d, v in found.items())
    if wrong:
        return Check("versions", "FAIL", f"{detail}; expected {expected} (pip install -e '.[train]')")
    return Check("versions", "PASS", detail)


def flash_attn_check() -> Check:
    """One ``flash_attn_varlen_func`` call on two packed bf16 sequences, against PyTorch's causal attention."""
    try:
        import torch
    except ImportError:
        return Check("flash_attn_varlen", "SKIP", "no torch")
    if not torch.cuda.is_available():
        return Check("flash_attn_varlen", "SKIP", "no CUDA device")
    try:
        from flash_attn import flash_attn_varlen_func
    except Exception as e:  # a wheel built for another torch/CUDA fails at import
        return Check("flash_attn_varlen", "FAIL", f"flash_attn does not import: {type(e).__name__}: {str(e)[:200]}")
    torch.manual_seed(0)
    lengths, heads, dim = [5, 9], 2, 64
    q, k, v = (torch.randn(sum(lengths), heads, dim, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    cu = torch.tensor([0, lengths[0], sum(lengths)], device="cuda", dtype=torch.int32)
    out = flash_attn_varlen_func(q, k, v, cu, cu, max(lengths), max(lengths), causal=True)
    worst = 0.0
    for s, e in ((0, lengths[0]), (lengths[0], sum(lengths))):
        ref = torch.nn.functional.scaled_dot_product_attention(
            *(t[s:e].transpose(0, 1).float() for t in (q, k, v)), is_causal=True
        ).transpose(0, 1)
        worst = max(worst, float((out[s:e].float() - ref).abs().max()))
    status = "PASS" if worst < 2e-2 else "FAIL"
    return Check("flash_attn_varlen", status, f"max |diff| vs torch SDPA {worst:.1e} (bound 2e-2)")


def compiler_check() -> Check:
    cc = shutil.which("gcc") or shutil.which("cc") or shutil.which("clang")
    if cc is None:
        return Check(
            "compiler", "FAIL", "no C compiler on PATH: Triton and torch.compile (vLLM's CUDA graphs) need one"
        )
    return Check("compiler", "PASS", cc)


def pytest_check() -> Check:
    if _version("pytest") is None:
        return Check("pytest", "FAIL", "pytest is not installed in this interpreter (the unit checks need it)")
    return Check("pytest", "PASS", f"pytest {_version('pytest')}")


def preflight() -> list[Check]:
    return [gpu_check(), versions_check(), flash_attn_check(), compiler_check(), pytest_check()]


# ----------------------------------------------------------------------------- what the smoke runs must show
def _metrics(path: Path) -> dict[int, dict]:
    steps: dict[int, dict] = {}
    if path.is_file():
        for line in path.read_text().splitlines():
            if line.strip():
                rec = json.loads(line)
                steps.setdefault(int(rec["step"]), {}).update(rec.get("data", {}))
    return steps


def metric_checks(run_dir: Path, gpu: bool = True) -> list[Check]:
    """Checks on ``run_dir``'s ``run1`` / ``run2`` (``tests/support/recipe_cpu_run.py``: metrics JSONL of verl's file
    logger, logs). ``gpu``: memory must be non-zero (the CPU run logs zeros)."""
    runs = {name: _metrics(run_dir / f"{name}.metrics.jsonl") for name in ("run1", "run2")}
    steps = {s: m for r in runs.values() for s, m in r.items() if any(k.startswith("actor/") for k in m)}
    if not steps:
        return [Check("metrics", "FAIL", f"no training step logged in {run_dir}/run1.metrics.jsonl, run2")]
    out = []
    norms = {s: m.get("actor/grad_norm") for s, m in sorted(steps.items())}
    finite = all(isinstance(v, (int, float)) and math.isfinite(v) for v in norms.values())
    out.append(
        Check("grad_norm", "PASS" if finite and any(v > 0 for v in norms.values()) else "FAIL", f"per step {norms}")
    )
    missing = {
        s: [k for k in ("timing_s/gen", "timing_s/ref", "timing_s/update_actor") if k not in m]
        for s, m in steps.items()
    }
    old = [s for s, m in steps.items() if "timing_s/old_log_prob" in m]
    bad = {s: v for s, v in missing.items() if v}
    out.append(
        Check(
            "passes",
            "FAIL" if bad or old else "PASS",
            f"gen, ref, update_actor timed every step{'' if not bad else f' (missing {bad})'}; "
            f"old-log-prob pass in steps {old or 'none'}",
        )
    )
    mm = {s: m.get("vsearch/mm_inputs_mb") for s, m in steps.items()}
    small = all(isinstance(v, (int, float)) and v < 0.01 for v in mm.values())
    out.append(Check("mm_inputs", "PASS" if small else "FAIL", f"vsearch/mm_inputs_mb per step {mm} (< 0.01)"))
    mem = {s: m.get("perf/max_memory_allocated_gb") for s, m in steps.items()}
    logged = all(isinstance(v, (int, float)) and (v > 0 or not gpu) for v in mem.values())
    out.append(Check("memory", "PASS" if logged else "FAIL", f"perf/max_memory_allocated_gb per step {mem}"))
    cache = {s: (m.get("vsearch/pixel_cache_hits"), m.get("vsearch/pixel_cache_misses")) for s, m in steps.items()}
    counted = all(h is not None and ms is not None and h + ms > 0 for h, ms in cache.values())
    out.append(Check("pixel_cache", "PASS" if counted else "FAIL", f"(hits, misses) per step {cache}"))
    log = run_dir / "run2.log"
    resumed = log.is_file() and "global_step_2" in log.read_text(errors="replace").split("Resuming from", 1)[-1][:500]
    out.append(Check("resume_log", "PASS" if resumed else "FAIL", f"'Resuming from ...global_step_2' in {log}"))
    return out


def pytest_lines(log: Path) -> list[Check]:
    """One check per test from pytest's ``-rA`` short summary in ``log`` (``PASSED node``, ``FAILED node - why``,
    ``SKIPPED [n] file:line: why``); nothing found: one FAIL naming the log."""
    status_of = {"PASSED": "PASS", "FAILED": "FAIL", "ERROR": "FAIL", "SKIPPED": "SKIP", "XFAIL": "PASS"}
    out = []
    for line in log.read_text(errors="replace").splitlines() if log.is_file() else []:
        word, _, rest = line.partition(" ")
        if word not in status_of:
            continue
        rest = rest.strip()
        if rest.startswith("["):  # SKIPPED [1] tests/gpu/x.py:12: why
            rest = rest.split("]", 1)[1].strip()
        node, _, why = rest.partition(" - ") if " - " in rest else rest.partition(": ")
        out.append(Check(node.rsplit("::", 1)[-1][:60] or node, status_of[word], why or node))
    return out or [Check("unit", "FAIL", f"no test result in {log}")]


# ----------------------------------------------------------------------------- summary
def read_lines(path: Path) -> list[Check]:
    checks = []
    for line in path.read_text().splitlines():
        if line.strip():
            name, status, detail = (line.split("\t", 2) + ["", ""])[:3]
            checks.append(Check(name, status, detail))
    return checks


def summarize(out: Path, files: list[Path], **extra: object) -> dict:
    """One JSON of every line file: each check with its step (the file's stem), and ``ok`` (no FAIL)."""
    checks = [{"step": f.stem, **asdict(c)} for f in files if f.is_file() for c in read_lines(f)]
    summary = {"ok": not any(c["status"] == "FAIL" for c in checks), "checks": checks, **extra}
    out.write_text(json.dumps(summary, indent=1))
    return summary


def _write(checks: list[Check], out: Path) -> int:
    with open(out, "a") as f:
        for c in checks:
            print(c.line(), flush=True)
            f.write(c.tsv())
    return 1 if any(c.status == "FAIL" for c in checks) else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    sub = ap.add_subparsers(dest="cmd", required=True)
    pf = sub.add_parser("preflight", allow_abbrev=False)
    pf.add_argument("out", type=Path)
    mt = sub.add_parser("metrics", allow_abbrev=False)
    mt.add_argument("run_dir", type=Path)
    mt.add_argument("out", type=Path)
    mt.add_argument("--cpu", action="store_true", help="a CPU run: memory is not required to be non-zero")
    pl = sub.add_parser("pytest-lines", allow_abbrev=False)
    pl.add_argument("log", type=Path)
    pl.add_argument("out", type=Path)
    sm = sub.add_parser("summary", allow_abbrev=False)
    sm.add_argument("out", type=Path)
    sm.add_argument("files", type=Path, nargs="+")
    sm.add_argument("--wall_s", type=int)
    args = ap.parse_args(argv)
    if args.cmd == "preflight":
        return _write(preflight(), args.out)
    if args.cmd == "metrics":
        return _write(metric_checks(args.run_dir, gpu=not args.cpu), args.out)
    if args.cmd == "pytest-lines":
        return _write(pytest_lines(args.log), args.out)
    summary = summarize(args.out, args.files, wall_s=args.wall_s)
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
