"""Audit the statistics of ``compare`` by simulation, larger than the suite's seconds-long checks; the README's
statistics table is this script's output (``tests/test_readme_statistics.py`` checks it is).

    PYTHONPATH=. .venv/bin/python scripts/stats_audit.py [--replicates 4000] [--json docs/stats_audit.json]

Models (``tests/support/stat_models.py``): questions on shared images whose per-question differences between
the systems correlate within an image (O3-Bench's 345 questions on 204 images, and its first 10/20/40 images),
``T`` trials; one run adding 20 % of the other's misses (+10 points, one trial); questions of different
difficulty each favouring one system, 5 to 40 samples. Measured at a nominal 95 % (5 %): the type-I error of
the sign-flip test over images (the default) and over samples (``--cluster sample``), the coverage of the
difference's interval both ways, of the accuracy's interval, of the cluster bootstrap, how often the interval
and the test disagree under the null, and the power at the printed minimum detectable effect. Takes a few
minutes on two cores.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
from scipy import stats
from scipy.optimize import brentq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from insight_o3.analysis.clusters import Design  # noqa: E402
from insight_o3.analysis.power import detectable_effect  # noqa: E402
from insight_o3.analysis.significance import (  # noqa: E402
    accuracy_interval,
    bootstrap_difference,
    difference_interval,
    sign_flip_pvalue,
)
from tests.support.stat_models import added_misses_runs, clustered_runs, images_of, population  # noqa: E402

ALPHA = 0.05
SHIFT = 0.6  # on the logit scale: about +9.5 points
MARK_BEGIN = "<!-- stats_audit: begin -->"
MARK_END = "<!-- stats_audit: end -->"


def _cover(lo: np.ndarray, hi: np.ndarray, truth: float) -> float:
    return float(((lo <= truth) & (truth <= hi)).mean())


def _within_image_correlation(d: np.ndarray, images: np.ndarray) -> float:
    """The correlation of two questions' differences on one image (every pair of questions sharing an image)."""
    pairs = [(i, j) for i in range(len(images)) for j in range(i + 1, len(images)) if images[i] == images[j]]
    first, second = (np.array(x) for x in zip(*pairs))
    x, y = d[:, first].ravel(), d[:, second].ravel()
    return float(np.corrcoef(np.r_[x, y], np.r_[y, x])[0, 1])


def _gap(shift: float, target: float) -> float:
    """How far the population difference at ``shift`` is from ``target`` (for the root search)."""
    p_a, p_b = population(shift)
    return p_b - p_a - target


def clustered(replicates: int, bootstrap_replicates: int) -> list[dict]:
    """Rows of the image-clustered model: per number of images and trials."""
    rows = []
    p_a, p_b = population(SHIFT)
    for n_images in (10, 20, 40, 204):
        images = images_of(n_images=n_images)
        des, single = Design.of(images), Design.single(len(images))
        for trials in (1, 3, 5):
            rng = np.random.default_rng(1000 * n_images + trials)
            xa, xb = clustered_runs(rng, images, replicates, trials)
            d = xb - xa
            icc = _within_image_correlation(d, images)
            p_img = sign_flip_pvalue(des.totals(d), 999, seed=1)
            p_smp = sign_flip_pvalue(d, 999, seed=1)
            lo0, hi0 = difference_interval(d, des)
            disagree = float(((p_img < ALPHA) != ((lo0 > 0) | (hi0 < 0))).mean())
            se = np.sqrt(des.variance_of_mean(d[:200]))
            mde = float(np.median([detectable_effect(s, des.count, ALPHA) for s in se]))
            xa, xb = clustered_runs(rng, images, replicates, trials, shift=SHIFT)
            d = xb - xa
            m = np.full(xb.shape, trials)
            boots = [bootstrap_difference(x, des, 999, seed=i) for i, x in enumerate(d[:bootstrap_replicates])]
            shift = brentq(_gap, 0.0, 6.0, args=(mde,))
            xa_m, xb_m = clustered_runs(rng, images, replicates, trials, shift=shift)
            power = float((sign_flip_pvalue(des.totals(xb_m - xa_m), 999, seed=2) < ALPHA).mean())
            rows.append(
                {
                    "images": n_images,
                    "samples": len(images),
                    "trials": trials,
                    "within_image_correlation": icc,
                    "type1_images": float((p_img < ALPHA).mean()),
                    "type1_samples": float((p_smp < ALPHA).mean()),
                    "disagree_null": disagree,
                    "cover_diff_images": _cover(*difference_interval(d, des), p_b - p_a),
                    "cover_diff_samples": _cover(*difference_interval(d, single), p_b - p_a),
                    "cover_acc_images": _cover(*accuracy_interval(xb, m, des), p_b),
                    "cover_bootstrap": float(np.mean([lo <= p_b - p_a <= hi for lo, hi in boots])),
                    "mde": mde,
                    "power_at_mde": power,
                }
            )
            print(json.dumps(rows[-1]), flush=True)
    return rows


def added_misses(replicates: int) -> dict:
    """B = A + 20 % of A's misses: the interval's exact coverage from 10 to 400 samples, and simulated at 10/20/40."""
    exact = {}
    for n in range(10, 401):
        k = np.arange(n + 1)
        lo, hi = difference_interval((np.arange(n) < k[:, None]).astype(float))
        exact[n] = float(stats.binom.pmf(k, n, 0.1)[(lo <= 0.1) & (0.1 <= hi)].sum())
    simulated = {}
    for n in (10, 20, 40):
        xa, xb = added_misses_runs(np.random.default_rng(n), n, replicates)
        simulated[n] = _cover(*difference_interval(xb - xa), 0.1)
    worst = min(exact, key=lambda n: exact[n])
    return {"exact_min": exact[worst], "exact_min_at": worst, "simulated": simulated}


def small_n(replicates: int) -> list[dict]:
    """Questions of different difficulty, each favouring one run (the suite's cases), 5 to 40 samples, 1–5 trials:
    the worst coverage over the cases of the difference's and of the accuracy's interval."""
    cases = [(0.3, 0.7, 0.2, 0.1), (0.8, 0.85, 0.1, 0.05), (0.9, 0.9, 0.05, 0.0)]
    rows = []
    for n in (5, 10, 40):
        for t in (1, 3, 5):
            rng = np.random.default_rng(7 * n + t)
            worst_d = worst_a = 1.0
            for lo, hi, favour, shift in cases:
                q = rng.uniform(lo, hi, (replicates, n))
                s = rng.choice([-favour, favour], (replicates, n))
                a = (rng.random((replicates, n, t)) < (q + s)[..., None]).mean(axis=-1)
                b = (rng.random((replicates, n, t)) < (q - s + shift)[..., None]).mean(axis=-1)
                worst_d = min(worst_d, _cover(*difference_interval(b - a), shift))
                worst_a = min(worst_a, _cover(*accuracy_interval(b, np.full(b.shape, t)), (lo + hi) / 2 + shift))
            rows.append({"samples": n, "trials": t, "cover_diff": worst_d, "cover_acc": worst_a})
            print(json.dumps(rows[-1]), flush=True)
    return rows


def _pct(v: float) -> str:
    return f"{100 * v:.1f}"


def markdown(audit: dict) -> str:
    """The README's table of the audit (between its markers)."""
    out = [
        f"Measured by `scripts/stats_audit.py` ({audit['replicates']} replicates per cell, bootstrap "
        f"{audit['bootstrap_replicates']}; nominal 95 %, tests at 5 %). Image-clustered model "
        "(`tests/support/stat_models.py`; ρ: the correlation of two questions' differences on one image):",
        "",
        "| images | samples | trials | ρ | type-I, over images (default) | type-I, over samples | difference CI "
        "covers, over images | over samples | accuracy CI covers | cluster bootstrap covers | CI and test "
        "disagree (null) | power at the printed MDE |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in audit["clustered"]:
        out.append(
            f"| {r['images']} | {r['samples']} | {r['trials']} | {r['within_image_correlation']:.2f} | "
            f"{_pct(r['type1_images'])} % | "
            f"{_pct(r['type1_samples'])} % | {_pct(r['cover_diff_images'])} % | {_pct(r['cover_diff_samples'])} % | "
            f"{_pct(r['cover_acc_images'])} % | {_pct(r['cover_bootstrap'])} % | {_pct(r['disagree_null'])} % | "
            f"{_pct(r['power_at_mde'])} % |"
        )
    am = audit["added_misses"]
    sim = ", ".join(f"{_pct(v)} % at {n}" for n, v in am["simulated"].items())
    out += [
        "",
        f"One run adding 20 % of the other's misses (+10 points, one trial): the difference's interval covers "
        f"{sim} samples (simulated); its exact coverage from 10 to 400 samples is at least {_pct(am['exact_min'])} % "
        f"(lowest at {am['exact_min_at']} samples).",
        "",
        "Unclustered questions of different difficulty, each favouring one run (worst of three cases):",
        "",
        "| samples | trials | difference CI covers | accuracy CI covers |",
        "|---|---|---|---|",
    ]
    for r in audit["small_n"]:
        out.append(f"| {r['samples']} | {r['trials']} | {_pct(r['cover_diff'])} % | {_pct(r['cover_acc'])} % |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], allow_abbrev=False)
    p.add_argument("--replicates", type=int, default=4000)
    p.add_argument("--bootstrap_replicates", type=int, default=400)
    p.add_argument("--json", default=str(ROOT / "docs" / "stats_audit.json"), help="where the figures go")
    a = p.parse_args(argv)
    start = time.time()
    audit = {
        "replicates": a.replicates,
        "bootstrap_replicates": a.bootstrap_replicates,
        "clustered": clustered(a.replicates, a.bootstrap_replicates),
        "added_misses": added_misses(a.replicates),
        "small_n": small_n(a.replicates),
    }
    Path(a.json).write_text(json.dumps(audit, indent=1) + "\n")
    print(markdown(audit))
    print(f"wrote {a.json} in {time.time() - start:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
