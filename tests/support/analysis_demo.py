"""Two scripted InSight-o3 systems on one demo benchmark, compared: the README's "Analysis" screenshot.

    PYTHONPATH=. .venv/bin/python -m tests.support.analysis_demo --work /tmp/analysis-demo \\
        [--screenshot docs/analysis_screenshot.png]

Both runs use the local scripted servers of :mod:`tests.support.viz_run` (real HTTP, the real
``evaluate`` command) on 18 questions x 3 trials: ``baseline`` searches with a vSearcher that often misses
the evidence or finds nothing, ``trained`` with one that mostly finds it. Each episode's role is drawn
from a seeded RNG, so the numbers are the same on every machine. Then ``compare`` writes
``compare.html`` and ``report`` writes the trained run's report; with ``--screenshot`` headless Chromium
photographs the top of the compare page.
"""

from __future__ import annotations

import argparse
import random
import shutil
import subprocess
from pathlib import Path

from PIL import Image

from insight_o3.scripts import compare, report
from tests.support.viz_run import make_demo_run

PRICES = "baseline-reasoner: {input: 0.25, output: 2.0}\ntrained-reasoner: {input: 0.25, output: 2.0}\n"
PRICES += "scripted-searcher: {input: 0.1, output: 0.4}\nscripted-judge: {input: 0.05, output: 0.4}\n"
#: Role probabilities per system (see tests.support.viz_run.ROLES).
MIXES = {
    "baseline": {
        "search_right": 0.30,
        "search_miss_wrong": 0.20,
        "not_found_wrong": 0.15,
        "search_twice_wrong": 0.10,
        "direct_right": 0.10,
        "direct_wrong": 0.10,
        "format_fail": 0.05,
    },
    "trained": {
        "search_right": 0.60,
        "search_miss_wrong": 0.06,
        "not_found_wrong": 0.04,
        "search_twice_wrong": 0.08,
        "direct_right": 0.08,
        "direct_wrong": 0.09,
        "format_fail": 0.05,
    },
}


def role_picker(system: str):
    roles, weights = zip(*MIXES[system].items())

    def role_of(sample: int, episode: int) -> str:
        return random.Random(f"{system}/{sample}/{episode}").choices(roles, weights)[0]

    return role_of


def build(work: Path, trials: int = 3) -> tuple[Path, Path, Path, Path]:
    """The two runs, ``compare.html`` and the trained run's ``report.html`` under ``work``."""
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    (work / "prices.yaml").write_text(PRICES)
    dirs = {}
    bench = None
    for system in ("baseline", "trained"):
        run = make_demo_run(
            work,
            num_trials=trials,
            bench=bench,
            role_of=role_picker(system),
            num_images=6,
            questions_per_image=3,
            eval_name=f"{system}/demo_bench",
            model=f"{system}-reasoner",
            extra_args=["--price_file", str(work / "prices.yaml"), "--concurrency", "4"],
            prompt_tokens=2400,  # about what a 1280x1280 image and the system prompt cost
        )
        bench, dirs[system] = run.bench_dir, run.eval_dir
    page = work / "compare.html"
    argv = [str(dirs["baseline"]), str(dirs["trained"]), "--out", str(page), "--json", str(work / "compare.json")]
    assert compare.main(argv) == 0
    rep = work / "report.html"
    assert report.main([str(dirs["trained"]), "--out", str(rep), "--max_samples", "8", "--thumb_px", "320"]) == 0
    return dirs["baseline"], dirs["trained"], page, rep


def screenshot(page: Path, out: Path, height: int = 1750, width: int = 1100) -> Path:
    """The top of ``page`` as a small PNG (headless Chromium, no network)."""
    chromium = shutil.which("chromium")
    if chromium is None:
        raise SystemExit("chromium not found (bash scripts/setup.sh installs it)")
    raw = out.with_suffix(".raw.png")
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--hide-scrollbars"]
    flags += ["--proxy-server=127.0.0.1:9", f"--user-data-dir={page.parent / 'chromium-profile'}"]
    subprocess.run(
        [chromium, *flags, f"--window-size={width},{height}", f"--screenshot={raw}", page.as_uri()],
        check=True,
        capture_output=True,
        timeout=120,
    )
    im = Image.open(raw).convert("RGB")
    im = im.resize((width * 3 // 4, height * 3 // 4), Image.Resampling.LANCZOS)
    im.quantize(colors=128, method=Image.Quantize.MEDIANCUT).save(out, optimize=True)
    raw.unlink()
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n")[0])
    p.add_argument("--work", default="/tmp/analysis-demo")
    p.add_argument("--screenshot", default=None)
    a = p.parse_args(argv)
    *_, page, rep = build(Path(a.work))
    print(f"wrote {page} and {rep}")
    if a.screenshot:
        print(f"wrote {screenshot(page, Path(a.screenshot))}")


if __name__ == "__main__":
    main()
