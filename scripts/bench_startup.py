"""How fast every command starts: the CPU seconds of ``python -m insight_o3.scripts.<X> --help`` (user + system of
the child, so a loaded machine does not inflate it as it does wall time), and the heaviest imports it pays for
(``-X importtime``, cumulative microseconds).

    .venv/bin/python scripts/bench_startup.py [--repeat 3] [--top 5] [--json out.json] [command ...]

Prints one line per command (the median CPU s over ``--repeat`` runs, the wall s, the number of modules loaded and
the heaviest top-level imports) and the slowest command last. Nothing is asserted here:
``tests/scripts/test_startup.py`` keeps the limit.
"""

from __future__ import annotations

import argparse
import json
import os
import pkgutil
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def commands() -> list[str]:
    """Every ``insight_o3.scripts`` command module (not the shared helpers)."""
    import insight_o3.scripts as pkg

    return sorted(m.name for m in pkgutil.iter_modules(pkg.__path__) if not m.name.startswith("_") and not m.ispkg)


def cpu_of(argv: list[str]) -> tuple[float, float, str]:
    """(CPU s of the child, wall s, its stderr) of one run of ``argv``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(
        argv, capture_output=True, text=True, cwd=REPO, env={**os.environ, "PYTHONWARNINGS": "ignore"}
    )
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {done.returncode}: {done.stderr[-2000:]}")
    return after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime, wall, done.stderr


def heaviest(importtime: str, top: int) -> tuple[int, list[tuple[str, int]]]:
    """(modules loaded, the ``top`` heaviest top-level third-party or project imports by cumulative us)."""
    rows = []
    for line in importtime.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        self_us, cumulative, name = line.removeprefix("import time:").split("|", 2)
        rows.append((name.rstrip(), int(self_us), int(cumulative)))
    top_level = [(n.strip(), c) for n, _s, c in rows if n.startswith(" ") and not n.startswith("  ")]
    return len(rows), sorted(top_level, key=lambda r: -r[1])[:top]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False
    )
    ap.add_argument("commands", nargs="*", help="command modules (default: all)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--top", type=int, default=4)
    ap.add_argument("--json", help="also write the figures here")
    a = ap.parse_args(argv)
    out = {}
    for name in a.commands or commands():
        mod = f"insight_o3.scripts.{name}"
        runs = [cpu_of([sys.executable, "-m", mod, "--help"]) for _ in range(a.repeat)]
        cpu = statistics.median(r[0] for r in runs)
        wall = statistics.median(r[1] for r in runs)
        _, _, imports = cpu_of([sys.executable, "-X", "importtime", "-m", mod, "--help"])
        n, heavy = heaviest(imports, a.top)
        out[name] = {"cpu_s": round(cpu, 3), "wall_s": round(wall, 3), "modules": n, "heaviest_us": dict(heavy)}
        shown = ", ".join(f"{k} {v / 1e6:.2f}s" for k, v in heavy)
        print(f"{name:28s} cpu {cpu:5.2f}s  wall {wall:5.2f}s  {n:4d} modules  {shown}", flush=True)
    worst = max(out, key=lambda k: out[k]["cpu_s"])
    print(
        f"slowest: {worst} {out[worst]['cpu_s']:.2f} CPU s; median {statistics.median(v['cpu_s'] for v in out.values()):.2f}"
    )
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
