"""The offline build's scripted endpoints (:mod:`insight_o3.o3bench.demo`, which the user-facing
``build_o3_bench_demo`` runs) with what only the tests need: faults switched per call and a log of what was asked.

* :func:`demo_inputs` is :func:`insight_o3.o3bench.demo.demo_sources` as a dict (``inp["records"]`` …).
* :class:`Oracle` is :class:`~insight_o3.o3bench.demo.ScriptedBuild` plus faults: ``state["e1_malformed_once"]``
  (sample keys answered without sections once), ``state["e1_malformed_always"]``, ``state["e2_prose_once"]`` (image
  keys answered with prose once), ``state["e2_trailing_commas"]`` (image keys whose JSON array has trailing commas).
  What was asked is kept in ``state["e1_seen"]`` (sample keys), ``state["e2_seen"]`` (image keys) and
  ``state["solver_seen"]`` ((model, question) pairs).
"""

from __future__ import annotations

import json
from pathlib import Path

from insight_o3.endpoints.scripted_server import Call, Reply
from insight_o3.o3bench.demo import (
    SOLVERS,
    ScriptedBuild,
    demo_sources,
    reply_body,
    texts_and_images,
)

__all__ = ["SOLVERS", "Oracle", "demo_inputs"]


def demo_inputs(out: Path, num_images: int = 6, seed: int = 0, questions: int = 3, min_side: int = 900) -> dict:
    """The demo bench under ``out/demo`` and its detector JSON under ``out/layouts/{chart,map}``, as a dict."""
    return vars(demo_sources(out, num_images, seed=seed, questions=questions, min_side=min_side))


class Oracle(ScriptedBuild):
    """The scripted build endpoints with switchable faults and a log of what was asked (module docstring)."""

    def __init__(self, demo_records: dict[str, list[dict]], demo_dir: Path, max_pixels: int | None = None):
        super().__init__(demo_records, demo_dir, max_pixels)
        self.state: dict = {}

    def e1(self, request: dict, call: Call) -> Reply:
        view = self.e1_view(request)
        if isinstance(view, Reply):
            return view
        sample_key = self.sample_key(*view)
        self.state.setdefault("e1_seen", []).append(sample_key)
        once = self.state.setdefault("e1_malformed_once", set())
        if sample_key in self.state.get("e1_malformed_always", set()) or sample_key in once:
            once.discard(sample_key)
            body = reply_body("This image shows a chart.", self.prompt_tokens(request), request.get("model", ""))
            return Reply(body=body)
        return super().e1(request, call)

    def e2(self, request: dict, call: Call) -> Reply:
        key = self.e2_image(request)
        if isinstance(key, Reply):
            return key
        self.state.setdefault("e2_seen", []).append(key)
        once = self.state.setdefault("e2_prose_once", set())
        if key in once:
            once.discard(key)
            text, _ = texts_and_images(request)
            return Reply(body=reply_body("Here are some great questions about the image!", len(text) // 4, "oracle"))
        array = json.dumps(self.e2_items(key), indent=1)
        if key in self.state.get("e2_trailing_commas", set()):
            array = array.replace('"\n }', '",\n }').replace("}\n]", "},\n]")  # valid JSON but for the commas
        return self.e2_reply(request, array)

    def solver(self, request: dict, call: Call, truth: dict[str, str] | None = None) -> Reply:
        reply = super().solver(request, call, truth)
        if reply.status == 200:
            found = self.answer_of(texts_and_images(request)[0], truth or self.truth)
            assert found is not None
            self.state.setdefault("solver_seen", []).append((request.get("model"), found[0]))
        return reply
