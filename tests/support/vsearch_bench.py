"""A region-localisation set for ``evaluate_vsearch`` and a scripted vSearcher whose outcome per region is known:
``a`` zooms once then answers its box exactly, ``b`` answers an empty box (or, with ``fail_b``, gets a 500), ``c``
answers a malformed box."""

from __future__ import annotations

import json

from insight_o3.imaging.geometry import Frame, smart_resize
from insight_o3.scripts import evaluate_vsearch as ev
from tests.support.openai_server import chat, error, request_text

#: The image's size (every region is on one image).
W, H = 420, 300
BUDGET = 100 * 28 * 28
KEY = "sk-vsearch-secret-987654321"
GT = {"a": [40, 30, 200, 150], "b": [10, 10, 100, 100], "c": [300, 200, 400, 290]}


def script(fail_b=False):
    mh, mw = smart_resize(H, W, max_pixels=BUDGET)
    frame = Frame((0, 0, W, H), (mw, mh))

    def reply(req, call):
        text = request_text(req)
        turn = sum(m["role"] == "assistant" for m in req["messages"])
        if "the a region" in text:  # zoom once, then the exact box in the model frame
            if turn == 0:
                return chat(
                    '<think>z</think><tool_call>{"name": "image_zoom_in_tool", '
                    '"arguments": {"bbox_2d": [20, 20, 160, 120]}}</tool_call>'
                )
            box = [round(v) for v in frame.from_original(GT["a"])]  # whole model-frame pixels, as the fork asks
            return chat(f"<think>ok</think><answer>{json.dumps(box)}</answer>")
        if "the b region" in text:
            return error(500, "down") if fail_b else chat("<think>no</think><answer>[0, 0, 0, 0]</answer>")
        return chat("<answer>[1, 2</answer>")  # malformed

    return reply


def run(ann, img_dir, out, url, *extra):
    return ev.main(
        [
            "--ann_file",
            ann,
            "--img_dir",
            img_dir,
            "--model",
            "vs",
            "--api_base_url",
            url,
            "--api_key",
            KEY,
            "--max_pixels",
            str(BUDGET),
            "--output_dir",
            str(out),
            "--max_retries",
            "0",
            "--concurrency",
            "2",
            *extra,
        ]
    )
