"""A builder step's settings are fixed by its first run that *succeeded* on an item: a run whose every item failed
(the wrong model named) leaves the workspace free for the right one; a step is reset by deleting its folder."""

from __future__ import annotations

import json
import shutil

from insight_o3.endpoints.scripted_server import chat
from insight_o3.scripts import build_o3_bench
from tests.support.o3bench_oracle import Oracle, demo_inputs
from tests.support.o3bench_run import sources_argv, step_argv


def _statuses(path) -> list[str]:
    return [json.loads(x)["status"] for x in path.read_text().splitlines() if x.strip()]


def test_a_step_that_failed_on_every_item_fixes_nothing(tmp_path, openai_server, capsys):
    inp = demo_inputs(tmp_path / "inputs", num_images=2, questions=1, min_side=600)
    oracle = Oracle(inp["records"], inp["demo"])
    ws = tmp_path / "ws"
    assert build_o3_bench.main(sources_argv(ws, inp)) == 0
    wrong = openai_server(lambda req, call: chat("I am a text model; I cannot see images."))
    argv = step_argv("extract", ws, wrong.base_url, "--parse_retries", "0")
    argv[argv.index("vlm")] = "wrong-model"
    assert build_o3_bench.main(argv) == 1  # every item failed: no section in any reply
    assert set(_statuses(ws / "extract" / "records.jsonl")) == {"failed"}
    right = openai_server(oracle.script())
    assert build_o3_bench.main(step_argv("extract", ws, right.base_url)) == 0  # was refused: first run 'wrong-model'
    assert set(_statuses(ws / "extract" / "records.jsonl")) == {"ok"}
    card = json.loads((ws / "extract" / "step_card.json").read_text())
    assert card["fixed_settings"]["model"] == "vlm" and len(card["history"]) == 2
    # once an item succeeded, the settings are fixed: another model is refused, naming both
    other = step_argv("extract", ws, right.base_url)
    other[other.index("vlm")] = "another-vlm"
    assert build_o3_bench.main(other) == 2
    assert 'model: first run "vlm", this run "another-vlm"' in capsys.readouterr().err
    # the documented reset of one step: delete its folder, then it runs afresh with any settings
    shutil.rmtree(ws / "extract")
    other[other.index("--api_base_url") + 1] = wrong.base_url
    assert build_o3_bench.main([*other, "--parse_retries", "0"]) == 1
    assert json.loads((ws / "extract" / "step_card.json").read_text())["fixed_settings"]["model"] == ("another-vlm")
