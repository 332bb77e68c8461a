"""Records with planted outcomes, built by hand in the exact shape the evaluation writes them.

:func:`episode` makes an InSight-o3 record (vReasoner conversation with a ``search`` entry per
vSearcher call, crops as image references, episode ``stats``) and :func:`single` a single-model record
(optionally with oracle crops in its first user turn); :func:`outcome_trials` a run's records with nothing but
planted verdicts (for the statistics). The sample is O3-Bench-like: a 1000x800 image with
two target layouts, ``T1 = (100, 100, 300, 200)`` and ``T2 = (600, 500, 700, 600)``, unless ``targets``
says otherwise (``None``: a benchmark without evidence annotation).
"""

from __future__ import annotations

from insight_o3.evaluation.schema import EvalRecord
from insight_o3.imaging.images import ImageRef
from insight_o3.protocol.trajectory import message

W, H = 1000, 800
IMAGE = "images/map.png"
T1 = (100.0, 100.0, 300.0, 200.0)
T2 = (600.0, 500.0, 700.0, 600.0)
LAYOUTS = {
    "1": {"layout_id": 1, "bbox": list(T1), "label": "legend"},
    "2": {"layout_id": 2, "bbox": [400, 0, 500, 100], "label": "title"},
    "3": {"layout_id": 3, "bbox": list(T2), "label": "table"},
}
DEFAULT_TARGETS = [1, 3]


def _ref(region, size=None) -> dict:
    x1, y1, x2, y2 = region
    return ImageRef(IMAGE, (float(x1), float(y1), float(x2), float(y2)), size or (int(x2 - x1), int(y2 - y1))).to_dict()


def _sample_fields(key: str, category: str, targets) -> dict:
    rec = {
        "index": int(key.lstrip("s") or 0) if key.lstrip("s").isdigit() else 0,
        "sample_key": key,
        "question_id": key,
        "file_name": IMAGE,
        "image_path": IMAGE,
        "question": f"[{key}] Which station is closest?",
        "options": "A. one\nB. two\nC. three\nD. four\nE. five\nF. No right choice",
        "answer": "C",
        "subset": category,
        "category": category,
    }
    if targets is not None:
        rec["target_layouts"] = list(targets)
        rec["layout_infos"] = LAYOUTS
        rec["img_width"], rec["img_height"] = W, H
    return rec


def episode(
    key: str,
    status: str,
    searches: list = (),
    episode_status: str = "answered",
    category: str = "map",
    targets=DEFAULT_TARGETS,
    trial: int = 0,
    has_answer: bool | None = None,
    usage: dict | None = None,
    cost: float | None = None,
) -> EvalRecord:
    """An InSight-o3 record. ``searches``: one item per vSearcher call, a crop box (found) or None
    (not found)."""
    msgs = [
        message("system", "SYSTEM"),
        message("user", {"type": "image", "image": _ref((0, 0, W, H), (W, H))}, f"[{key}] question"),
    ]
    for k, box in enumerate(searches):
        call = {
            "description": f"region {k} of {key}",
            "status": "found" if box is not None else "not_found",
            "box_original": list(box) if box is not None else None,
            "box_model": list(box) if box is not None else None,
            "n_tool_calls": 1,
            "n_turns": 2,
            "format_ok": True,
            "error": None,
            "turn_usage": [],
            "model_size": [W, H],
            "trajectory": [
                message("system", "VSEARCHER SYSTEM"),
                message("user", {"type": "image", "image": _ref((0, 0, W, H), (W, H))}, f"Locate region {k}."),
                message("assistant", "<answer>[0, 0, 0, 0]</answer>"),
            ],
        }
        msgs.append(
            message(
                "assistant",
                f"<tool_call>region_description={{region {k}}}</tool_call>",
                search=call,
            )
        )
        if box is not None:
            msgs.append(message("user", {"type": "image", "image": _ref(box)}, "continue"))
        else:
            msgs.append(message("user", "not found"))
    final = "\\boxed{C}" if status == "correct" else "\\boxed{B}"
    msgs.append(message("assistant", final))
    n_not_found = sum(b is None for b in searches)
    rec = {
        **_sample_fields(key, category, targets),
        "trial": trial,
        "eval_result": {
            "status": status,
            "has_answer": has_answer if has_answer is not None else status in ("correct", "wrong"),
            "response": final if status != "failed" else None,
            "finish_reason": "stop",
            "extracted_answer": "C" if status == "correct" else ("B" if status == "wrong" else None),
            "judge_method": "rule" if status == "correct" else ("judge" if status == "wrong" else None),
            "judge_outputs": [] if status != "wrong" else ["<wrong>"],
            "trajectory": msgs if status != "failed" else [],
            "stats": {
                "n_search_calls": len(searches),
                "n_search_not_found": n_not_found,
                "n_format_retries": 0,
                "feedback": [None] * len(searches),
                "status": episode_status if status != "failed" else "failed",
                "protocol_error": None,
            },
        },
    }
    if usage is not None:
        rec["usage"] = usage
    if cost is not None:
        rec["cost_usd"] = cost
    return EvalRecord.from_dict(rec)


def single(
    key: str,
    status: str,
    crops: list = (),
    category: str = "chart",
    targets=DEFAULT_TARGETS,
    trial: int = 0,
    has_answer: bool | None = None,
    finish_reason: str = "stop",
    usage: dict | None = None,
    cost: float | None = None,
) -> EvalRecord:
    """A single-model record; ``crops`` (oracle mode) follow the whole image in the user turn."""
    parts = [{"type": "image", "image": _ref((0, 0, W, H), (W, H))}]
    parts += [{"type": "image", "image": _ref(c)} for c in crops]
    reply = "<answer>C</answer>" if status == "correct" else "<answer>B</answer>"
    msgs = [message("user", *parts, f"[{key}] question"), message("assistant", reply)]
    rec = {
        **_sample_fields(key, category, targets),
        "trial": trial,
        "eval_result": {
            "status": status,
            "has_answer": has_answer if has_answer is not None else status in ("correct", "wrong"),
            "response": reply if status != "failed" else None,
            "finish_reason": finish_reason if status != "failed" else None,
            "extracted_answer": {"correct": "C", "wrong": "B"}.get(status),
            "trajectory": msgs,
        },
    }
    if usage is not None:
        rec["usage"] = usage
    if cost is not None:
        rec["cost_usd"] = cost
    return EvalRecord.from_dict(rec)


def outcome_trials(correct, categories: list[str], failed=(), images=None) -> list[list[EvalRecord]]:
    """Records of a run whose (sample, trial) correctness is ``correct[i, k]`` (sample keys ``q<i>``);
    ``failed``: the (i, k) lost to API errors; ``images``: each sample's image (default: its own)."""
    n, t = correct.shape
    return [
        [
            EvalRecord.from_dict(
                {
                    "sample_key": f"q{i}",
                    "index": i,
                    "image": images[i] if images is not None else f"img{i}.png",
                    "category": categories[i],
                    "trial": k,
                    "eval_result": {
                        "status": "failed" if (i, k) in failed else ("correct" if correct[i, k] else "wrong")
                    },
                }
            )
            for i in range(n)
        ]
        for k in range(t)
    ]


def two_agent(
    key: str, status: str, chain: str | None, chain_has_answer: bool = True, category: str = "chart"
) -> EvalRecord:
    """An Insight-V record (``evaluate --agent insight_v``): the summary judged ``status``, the reasoning chain's own
    answer judged ``chain`` (``stats.judged.chain``; None: not judged)."""
    rec = single(key, status, category=category).to_dict()
    if chain is not None:
        rec["eval_result"]["stats"] = {
            "chain": "<thoughts>\nchain</thoughts>\n",
            "judged": {"chain": {"status": chain, "extracted_answer": "x", "has_answer": chain_has_answer}},
        }
    return EvalRecord.from_dict(rec)
