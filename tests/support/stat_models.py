"""Generative models of two runs on one benchmark, for checking the statistics of ``compare`` by simulation
(``tests/analysis/test_significance_simulation.py``, ``scripts/stats_audit.py``).

* :func:`clustered_runs` — questions on shared images. Each question has a difficulty on the logit scale
  (an image part plus a question part: logit-normal accuracy), and the two systems differ on it by an
  interaction ``u`` that is partly the image's (share ``rho``) and partly the question's; system A's logit is
  ``difficulty + u/2 − shift/2``, B's ``difficulty − u/2 + shift/2``, ``trials`` Bernoulli trials each. With
  ``shift = 0`` the two systems are exchangeable within an image (the null of the sign-flip test over images),
  yet the per-question differences correlate within an image. :data:`O3_BENCH_SIZES` puts 345 questions on 204
  images, O3-Bench's counts (the split into 1–4 questions per image is ours).
* :func:`added_misses_runs` — B is A plus a share of A's misses (B right wherever A is, and on ``added`` of
  the samples A missed): a true difference of ``(1 − p_a) · added``, every discordant pair one way.

Each returns the per-sample accuracies ``(x_a, x_b)`` of shape ``(replicates, samples)``, each sample's trials
averaged; :func:`population` gives the population accuracies a clustered model's intervals should cover.
"""

from __future__ import annotations

import functools

import numpy as np
from scipy.special import expit

#: Questions per image: 103 images with one, 70 with two, 22 with three, 9 with four (345 on 204), in a fixed
#: shuffled order so that the first ``k`` images of a smaller benchmark mix the sizes too.
O3_BENCH_SIZES = tuple(
    int(v) for v in np.random.default_rng(0).permutation((1,) * 103 + (2,) * 70 + (3,) * 22 + (4,) * 9)
)


def images_of(sizes: tuple[int, ...] = O3_BENCH_SIZES, n_images: int | None = None) -> np.ndarray:
    """Each question's image label (``"img<k>"``) for the first ``n_images`` images of ``sizes``."""
    s = np.asarray(sizes[: n_images or len(sizes)])
    return np.array([f"img{k}" for k in np.repeat(np.arange(len(s)), s)], dtype=object)


def clustered_runs(
    rng: np.random.Generator,
    images: np.ndarray,
    replicates: int,
    trials: int = 3,
    rho: float = 0.6,
    sd_interaction: float = 3.0,
    sd_question: float = 1.0,
    sd_image: float = 0.5,
    shift: float = 0.0,
) -> tuple[np.ndarray, np.ndarray]:
    """Per-sample accuracies of two runs on questions whose images are ``images`` (module docstring)."""
    _, g = np.unique(images, return_inverse=True)
    n, n_img = len(g), int(g.max()) + 1
    base = rng.normal(0, sd_image, (replicates, n_img))[:, g] + rng.normal(0, sd_question, (replicates, n))
    u = rng.normal(0, sd_interaction * np.sqrt(rho), (replicates, n_img))[:, g]
    u = u + rng.normal(0, sd_interaction * np.sqrt(1 - rho), (replicates, n))
    a = rng.random((replicates, n, trials)) < expit(base + u / 2 - shift / 2)[..., None]
    b = rng.random((replicates, n, trials)) < expit(base - u / 2 + shift / 2)[..., None]
    return a.mean(axis=-1), b.mean(axis=-1)


@functools.lru_cache(maxsize=4)
def _population_draws(sd_interaction: float, sd_question: float, sd_image: float, draws: int, seed: int):
    rng = np.random.default_rng(seed)
    return rng.normal(0, sd_image, draws) + rng.normal(0, sd_question, draws), rng.normal(0, sd_interaction, draws)


def population(
    shift: float,
    sd_interaction: float = 3.0,
    sd_question: float = 1.0,
    sd_image: float = 0.5,
    draws: int = 1_000_000,
    seed: int = 12345,
) -> tuple[float, float]:
    """The population accuracies ``(p_A, p_B)`` of :func:`clustered_runs` (Monte Carlo over the same draws for
    every ``shift``, error about 2e-4): what its intervals should cover (their difference for the paired one)."""
    base, u = _population_draws(sd_interaction, sd_question, sd_image, draws, seed)
    return float(expit(base + u / 2 - shift / 2).mean()), float(expit(base - u / 2 + shift / 2).mean())


def added_misses_runs(
    rng: np.random.Generator, n: int, replicates: int, p_a: float = 0.5, added: float = 0.2
) -> tuple[np.ndarray, np.ndarray]:
    """One trial each: A right with probability ``p_a``; B right where A is and on ``added`` of A's misses."""
    a = rng.random((replicates, n)) < p_a
    b = a | (rng.random((replicates, n)) < added)
    return a.astype(float), b.astype(float)
