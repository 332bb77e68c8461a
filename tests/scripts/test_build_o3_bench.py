"""``build-o3-bench`` end to end, offline: demo-bench charts and maps (layouts known) as PaddleX detector JSON,
scripted endpoints on 127.0.0.1 (tests/support/o3bench_oracle.py) for the VLM, the text model, three filter models
and the judge; sources -> extract -> synthesize -> validate -> filter -> review page -> a decisions file applied ->
release, then ``evaluate`` on the release. Also: a SIGKILL and resume per model-calling step, reply-format retries,
budgets, --limit, the workspace lock and a refused key."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from insight_o3.scripts import build_o3_bench, evaluate
from insight_o3.storage.lock import acquire
from insight_o3.viz.bench_view import bench_table, load_bench
from tests.support.o3bench_oracle import SOLVERS, Oracle, demo_inputs
from tests.support.o3bench_run import KEY, decide, sources_argv, step_argv
from tests.support.openai_server import refuse
from tests.support.records import by_key as records
from tests.support.records import jsonl as lines
from tests.support.waiting import wait_for_lines, wait_until

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """Six demo images (3 charts, 3 maps; 3 questions each) with detector JSON, and the oracle that knows them."""
    inp = demo_inputs(tmp_path_factory.mktemp("o3bench_demo"), num_images=6, questions=3, min_side=900)
    return inp, Oracle(inp["records"], inp["demo"])


@pytest.fixture
def oracle(demo):
    inp, o = demo
    o.state.clear()
    return o


def run(*argv: str) -> int:
    return build_o3_bench.main(list(argv))


def sources_ws(tmp_path: Path, demo) -> Path:
    ws = tmp_path / "ws"
    assert run(*sources_argv(ws, demo[0])) == 0
    return ws


# ------------------------------------------------------------------------------------------------ end to end
def test_offline_build_end_to_end_then_evaluate(tmp_path, demo, oracle, openai_server, capsys):
    inp, _ = demo
    srv = openai_server(oracle.script())
    ws = sources_ws(tmp_path, demo)
    srcs = lines(ws / "sources.jsonl")
    assert sorted(s["key"] for s in srcs) == sorted(inp["records"])
    assert all(len(s["layouts"]) == len(inp["records"][s["key"]][0]["layout_infos"]) for s in srcs)

    # E.1 on every crop and full image; one reply without the sections is asked again
    assert oracle.alias["map/map_0004#L5"] == "map/map_0004#L5"  # a crop like no other
    oracle.state["e1_malformed_once"] = {"map/map_0004#L5"}
    assert run(*step_argv("extract", ws, srv.base_url)) == 0
    ext = records(ws / "extract" / "records.jsonl")
    n_tasks = sum(1 + len(s["layouts"]) for s in srcs)
    assert len(ext) == n_tasks and all(r["status"] == "ok" for r in ext.values())
    assert ext["map/map_0004#L5"]["attempts"] == 2 and len(oracle.state["e1_seen"]) == n_tasks + 1
    assert ext["map/map_0000#full"]["caption"].startswith("DEMO-IMAGE map/map_0000")
    map0 = next(s for s in srcs if s["key"] == "map/map_0000")
    assert ext["map/map_0000#L2"]["image"]["region"] == map0["layouts"][1]["bbox"]  # the crop sent is the layout

    # E.2 from text only (the oracle refuses any request with an image); prose instead of JSON is asked again
    # a reply that is JSON but for trailing commas is repaired, not paid for again, and the record says so
    oracle.state["e2_prose_once"] = {"map/map_0004"}
    oracle.state["e2_trailing_commas"] = {"chart/chart_0001"}
    assert run(*step_argv("synthesize", ws, srv.base_url)) == 0
    syn = records(ws / "synthesize" / "records.jsonl")
    assert set(syn) == set(inp["records"]) and all(r["status"] == "ok" for r in syn.values())
    assert syn["map/map_0004"]["attempts"] == 2
    fixed = syn["chart/chart_0001"]
    assert fixed["attempts"] == 1 and oracle.state["e2_seen"].count("chart/chart_0001") == 1
    assert ",\n]" in fixed["reply"] and len(fixed["items"]) == 4
    assert fixed["json_repair"]["library"].startswith("json-repair ")
    assert "line" in fixed["json_repair"]["error"] and all(
        "json_repair" not in r for k, r in syn.items() if k != "chart/chart_0001"
    )
    assert json.loads((ws / "synthesize" / "step_card.json").read_text())["summary"]["replies_repaired"] == 1
    e2_requests = [r for r in srv.requests if r["model"] == "writer"]
    assert all(isinstance(m["content"], str) for r in e2_requests for m in r["messages"])  # text only, no image part

    # validation: every planted bad item is rejected for its own reason; F share reported
    assert run("validate", "--output_dir", str(ws)) == 0
    report = json.loads((ws / "validate" / "report.json").read_text())
    rejected = {r["item_id"]: r["reason"] for r in lines(ws / "validate" / "rejected.jsonl")}
    planted = ["six_options", "f_last", "answer_letter", "forbidden_word", "unknown_layout", "malformed"]
    for k, key in enumerate(sorted(inp["records"])):
        assert rejected[f"{key}#q3"] == planted[k % 6]  # the oracle's planted item comes after the 3 real ones
    cands = lines(ws / "validate" / "candidates.jsonl")
    assert report["accepted"] == len(cands) and report["items"] == len(cands) + len(rejected) == 6 * 4
    assert sum(report["rejected_by_reason"].values()) == len(rejected)
    assert report["f_share"]["limit"] == 0.1 and "per_image" in report["f_share"]
    for c in cands:  # target layouts are the cited ones
        demo_rec = next(r for r in inp["records"][c["image_key"]] if r["question"] == c["question"])
        assert set(c["target_layouts"]) <= set(map(int, demo_rec["layout_infos"]))

    # difficulty filter: exactly the items all three scripted models solve are dropped
    assert run(*step_argv("filter", ws, srv.base_url)) == 0
    kept = lines(ws / "filter" / "kept.jsonl")
    dropped = lines(ws / "filter" / "dropped.jsonl")
    by_all = {c["item_id"] for c in cands if Oracle.difficulty(c["question"]) == 3}
    assert {d["item_id"] for d in dropped} == by_all and len(kept) + len(dropped) == len(cands)
    frec = records(ws / "filter" / "records.jsonl")
    for c in cands:
        assert frec[c["item_id"]]["n_solved"] == Oracle.difficulty(c["question"])
    fcard = json.loads((ws / "filter" / "step_card.json").read_text())
    assert fcard["summary"]["solved_by_n_models"]["3"] == len(by_all) and fcard["totals"]["tokens_total"] > 0
    solver_requests = [r for r in srv.requests if r["model"] in SOLVERS]
    assert all("system" not in [m["role"] for m in r["messages"]] for r in solver_requests)  # model default prompt
    assert all(r["max_completion_tokens"] == 16384 for r in solver_requests)

    # review: a page per batch, a decisions file filled in, applied (one rejection, one edit)
    assert run("review", "page", "--output_dir", str(ws), "--batch_size", "4") == 0
    pages = sorted((ws / "review").glob("batch_*.html"))
    assert len(pages) == -(-len(kept) // 4)
    html = "".join(p.read_text() for p in pages)
    assert all(k["item_id"] in html for k in kept) and "http://" not in html.replace(srv.base_url, "")
    decisions = decide(ws, rejects=1, edits=1)
    assert run("review", "apply", "--output_dir", str(ws)) == 0
    reviewed = {r["item_id"]: r for r in lines(ws / "review" / "reviewed.jsonl")}
    assert {k: r["decision"] for k, r in reviewed.items()} == decisions

    # release: A-E shuffled with the seed, F last, in O3-Bench's layout; stats and run card
    assert run("release", "--output_dir", str(ws), "--seed", "7") == 0
    rel = ws / "release"
    meta = lines(rel / "metadata.jsonl")
    accepted = [k for k, d in decisions.items() if d != "reject"]
    assert sorted(m["question_id"] for m in meta) == sorted(accepted)
    for m in meta:
        assert (rel / m["file_name"]).is_file() and m["file_name"].startswith(f"images/{m['subset']}/")
        opts = dict(line.split(". ", 1) for line in m["options"].split("\n"))
        assert list(opts) == list("ABCDEF") and opts["F"] == "No right choice"
        item = reviewed[m["question_id"]]["item"]
        before = dict(line.split(". ", 1) for line in item["options"].split("\n"))
        assert opts[m["answer"]] == before[item["answer"]]  # the answer moved with its option
        assert m["target_layouts"] == item["target_layouts"] and m["layout_infos"]
    stats = json.loads((rel / "stats.json").read_text())
    card = json.loads((rel / "run_card.json").read_text())
    assert stats["samples"] == len(meta) and stats["paper"]["f_share"] == 0.072
    assert card["seeds"] == {"option_shuffle": 7} and set(card["steps"]) >= {"extract", "synthesize", "filter"}
    assert card["steps"]["extract"]["model"]["model"] == "vlm" and card["totals"]["tokens_total"] > 0
    assert len(card["prompts_sha256"]["EXTRACTION_PROMPT"]) == 64
    assert card["validation"]["rules_sha256"] == report["rules_sha256"] and "file" not in card["validation"]
    first = (rel / "metadata.jsonl").read_bytes()
    assert (
        run("release", "--output_dir", str(ws), "--seed", "7") == 0 and (rel / "metadata.jsonl").read_bytes() == first
    )

    # the viewers and evaluate read the release as it is
    samples = load_bench(rel / "metadata.jsonl")
    table = bench_table(samples)
    assert (table["n_targets"] >= 2).all() and (table["n_layouts"] >= 8).all()
    truth = {m["question"]: m["answer"] for m in meta}
    ev = openai_server(oracle.script(truth))
    argv = ["--ann_file", str(rel / "metadata.jsonl"), "--img_dir", str(rel), "--model", "solver-b"]
    argv += ["--api_base_url", ev.base_url, "--api_key", KEY, "--judge_model", "judge"]
    argv += ["--judge_api_base_url", ev.base_url, "--judge_api_key", KEY, "--output_dir", str(tmp_path / "eval")]
    argv += ["--eval_name", "solver-b/built", "--no_progress", "--image_workers", "0"]
    assert evaluate.main(argv) == 0
    summary = json.loads((tmp_path / "eval" / "solver-b" / "built" / "summary_metrics.json").read_text())
    expected = sum(Oracle.difficulty(m["question"]) >= 2 for m in meta) / len(meta)  # solver-b: difficulty >= 2
    assert summary["overall_accuracy"]["mean"] == pytest.approx(expected)

    # the key was never written anywhere
    for p in ws.rglob("*"):
        if p.is_file() and p.suffix in (".json", ".jsonl", ".html", ".txt"):
            assert KEY not in p.read_text(errors="ignore"), p
    assert KEY not in capsys.readouterr().err


# ------------------------------------------------------------------------------------------------ kill + resume
def start(argv: list[str]) -> subprocess.Popen:
    """``build_o3_bench`` in a subprocess (no key or URL from the environment)."""
    env = {k: v for k, v in os.environ.items() if not k.endswith(("_API_KEY", "_BASE_URL"))}
    env["PYTHONPATH"] = str(REPO)
    return subprocess.Popen(
        [sys.executable, "-m", "insight_o3.scripts.build_o3_bench", *argv],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def kill_when(argv: list[str], done: Path, n: int, held=None, in_flight: int = 1) -> None:
    """Run ``build_o3_bench`` in a subprocess and SIGKILL it once ``done`` holds ``n`` records and, with ``held``
    (the step's ``block_after`` server), once its next ``in_flight`` requests are held there: a request still on
    its way at the kill would reach the server after :func:`settle` counted, and look like one the resumed run
    asked again."""
    proc = start(argv)
    try:
        wait_until(lambda: len(records(done)) >= n or proc.poll() is not None, 60, f"{n} records in {done}")
        assert proc.poll() is None, "the step ended before it could be killed"
        assert len(records(done)) >= n
        if held is not None:
            held.wait_blocked(in_flight)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    with open(done, "ab") as f:  # the worst case too: a torn half-written line
        f.write(b'{"sample_key": "torn", "sta')


def settle(oracle: Oracle, seen: str, srv) -> int:
    """After ``srv.release()``: wait until the requests the killed run left held have reached the oracle (their
    replies go nowhere); returns how many requests it has seen."""
    wait_until(lambda: len(oracle.state.get(seen, [])) >= srv.count, 30, "the held requests at the oracle")
    return len(oracle.state.get(seen, []))


def test_extract_killed_then_resumed_asks_only_what_is_left(tmp_path, demo, oracle, openai_server):
    ws = sources_ws(tmp_path, demo)
    srv = openai_server(oracle.script(), block_after=5)
    log = ws / "extract" / "records.jsonl"
    kill_when(step_argv("extract", ws, srv.base_url, "--concurrency", "1"), log, 5, held=srv)
    done = set(records(log)) - {"torn"}
    assert 5 <= len(done) < 20
    srv.release()
    seen = settle(oracle, "e1_seen", srv)
    assert run(*step_argv("extract", ws, srv.base_url)) == 0
    again = oracle.state["e1_seen"][seen:]
    total = sum(1 + len(s["layouts"]) for s in lines(ws / "sources.jsonl"))
    left = set(records(log)) - done
    assert sorted(again) == sorted(oracle.alias[k] for k in left) and len(again) == total - len(done)
    assert len(log.read_text().splitlines()) == total  # compacted: one line per task, the torn line gone
    card = json.loads((ws / "extract" / "step_card.json").read_text())
    killed, resumed = card["history"]  # the killed run is there, found unfinished by the next
    assert card["totals"]["records"] == total and resumed["status"] == "finished"
    assert killed["status"] == "unfinished"  # its spend, as of its last FLUSH_S: see the test below


def test_every_run_is_in_the_step_card_with_its_spend_however_it_ends(tmp_path, demo, oracle, openai_server, caplog):
    """A run stopped by SIGTERM with a request in flight and one reply paid for but not recorded, then a run killed
    by SIGKILL, then one that finishes: the step card's history holds all three with their spend,
    requests in flight at a kill included."""
    ws = sources_ws(tmp_path, demo)
    srv = openai_server(oracle.script())
    assert run(*step_argv("extract", ws, srv.base_url)) == 0
    keys = [s["key"] for s in lines(ws / "sources.jsonl")]
    oracle.state["e2_prose_once"] = {keys[1]}  # image 1's first reply is prose (paid for), its retry is held
    held = openai_server(oracle.script(), block_after=2)
    proc = start(step_argv("synthesize", ws, held.base_url, "--concurrency", "1"))
    try:
        held.wait_blocked(1)
        wait_for_lines(1, ws / "synthesize" / "records.jsonl")  # image 0's record, before its retry was sent
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 4
    finally:
        proc.kill()
    card_file = ws / "synthesize" / "step_card.json"
    (entry,) = json.loads(card_file.read_text())["history"]
    assert entry["status"] == "interrupted" and entry["new_records"] == {"ok": 1}
    assert entry["requests_unanswered"] == 1 and entry["endpoints"]["synthesizer"]["ok"] == 2
    assert entry["usage"]["synthesizer"]["requests"] == 2
    rec = records(ws / "synthesize" / "records.jsonl")[keys[0]]
    recorded = rec["usage"]["synthesizer"]["prompt_tokens"] + rec["usage"]["synthesizer"]["completion_tokens"]
    assert entry["tokens_unrecorded"] == entry["tokens"] - recorded > 0  # the prose reply: no record shows it

    blocked = openai_server(oracle.script(), block_after=2)
    proc = start(step_argv("synthesize", ws, blocked.base_url, "--concurrency", "1"))

    def entry_caught_up() -> bool:  # the working run's entry shows the records of its log (within FLUSH_S)
        last = json.loads(card_file.read_text())["history"][-1]
        return len(records(ws / "synthesize" / "records.jsonl")) - 1 == sum((last.get("new_records") or {}).values())

    try:
        blocked.wait_blocked(1)
        wait_until(entry_caught_up, 20, "the run's history entry to count the records of its log")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    killed = json.loads(card_file.read_text())["history"][-1]
    assert killed["status"] == "started" and killed["new_records"] == {"ok": 2} and killed["tokens"] > 0
    assert killed["usage"]["synthesizer"]["requests"] == 2

    blocked.release()
    before = len(records(ws / "synthesize" / "records.jsonl"))
    caplog.set_level("WARNING")
    assert run(*step_argv("synthesize", ws, srv.base_url)) == 0
    history = json.loads(card_file.read_text())["history"]
    assert [h["status"] for h in history] == ["interrupted", "unfinished", "finished"]
    assert any("did not finish (killed by SIGKILL" in r.getMessage() for r in caplog.records)
    assert len(records(ws / "synthesize" / "records.jsonl")) == len(keys)
    assert history[2]["new_records"] == {"ok": len(keys) - before} and history[2]["requests_unanswered"] == 0


def test_synthesize_killed_then_resumed(tmp_path, demo, oracle, openai_server):
    ws = sources_ws(tmp_path, demo)
    srv = openai_server(oracle.script())
    assert run(*step_argv("extract", ws, srv.base_url)) == 0
    blocked = openai_server(oracle.script(), block_after=2)
    log = ws / "synthesize" / "records.jsonl"
    kill_when(step_argv("synthesize", ws, blocked.base_url, "--concurrency", "1"), log, 2, held=blocked)
    done = set(records(log)) - {"torn"}
    blocked.release()
    seen = settle(oracle, "e2_seen", blocked)
    assert run(*step_argv("synthesize", ws, blocked.base_url)) == 0
    again = oracle.state["e2_seen"][seen:]
    assert sorted(again) == sorted(set(demo[0]["records"]) - done)
    assert set(records(log)) == set(demo[0]["records"])


def test_filter_killed_then_resumed(tmp_path, demo, oracle, openai_server):
    ws = sources_ws(tmp_path, demo)
    srv = openai_server(oracle.script())
    for step in ("extract", "synthesize"):
        assert run(*step_argv(step, ws, srv.base_url)) == 0
    assert run("validate", "--output_dir", str(ws)) == 0
    cands = lines(ws / "validate" / "candidates.jsonl")
    solvers = openai_server(oracle.script(), block_after=6)  # two items' worth of solver requests, one at a time
    log = ws / "filter" / "records.jsonl"
    argv = step_argv("filter", ws, solvers.base_url, "--concurrency", "1", "--judge_api_base_url", srv.base_url)
    kill_when(argv, log, 2, held=solvers, in_flight=len(SOLVERS))  # the next item's solvers are asked at once
    done = set(records(log)) - {"torn"}
    solvers.release()
    seen = settle(oracle, "solver_seen", solvers)
    assert run(*step_argv("filter", ws, solvers.base_url, "--judge_api_base_url", srv.base_url)) == 0
    again = oracle.state["solver_seen"][seen:]
    left = [c["question"] for c in cands if c["item_id"] not in done]
    assert sorted(again) == sorted((m, q) for q in left for m in SOLVERS)  # each model asked once per item left
    by_all = {c["item_id"] for c in cands if Oracle.difficulty(c["question"]) == 3}
    assert {d["item_id"] for d in lines(ws / "filter" / "dropped.jsonl")} == by_all  # as an uninterrupted run


# ------------------------------------------------------------------------------------------------ the rest
def test_a_reply_that_never_has_the_sections_is_a_failed_record_retried_next_run(tmp_path, demo, oracle, openai_server):
    ws = sources_ws(tmp_path, demo)
    srv = openai_server(oracle.script())
    assert oracle.alias["map/map_0000#L4"] == "map/map_0000#L4"
    oracle.state["e1_malformed_always"] = {"map/map_0000#L4"}
    assert run(*step_argv("extract", ws, srv.base_url, "--parse_retries", "1")) == 1
    bad = records(ws / "extract" / "records.jsonl")["map/map_0000#L4"]
    assert bad["status"] == "failed" and bad["attempts"] == 2 and bad["reply"] == "This image shows a chart."
    assert "missing section(s)" in bad["error"]
    assert run(*step_argv("synthesize", ws, srv.base_url)) == 1  # map_0000 waits for its extraction
    syn = json.loads((ws / "synthesize" / "step_card.json").read_text())["summary"]
    assert syn["images_waiting_for_extraction"] == 1 and "map/map_0000" not in records(
        ws / "synthesize" / "records.jsonl"
    )
    oracle.state["e1_malformed_always"] = set()
    seen = len(oracle.state["e1_seen"])
    assert run(*step_argv("extract", ws, srv.base_url)) == 0
    assert oracle.state["e1_seen"][seen:] == ["map/map_0000#L4"]
    rec = records(ws / "extract" / "records.jsonl")["map/map_0000#L4"]
    assert rec["status"] == "ok" and rec["usage_earlier"]["extractor"]["requests"] == 2  # what the failure cost


def test_limit_then_the_rest_and_a_budget_stop(tmp_path, demo, oracle, openai_server, capsys):
    ws = sources_ws(tmp_path, demo)
    srv = openai_server(oracle.script())
    first = lines(ws / "sources.jsonl")[0]
    assert run(*step_argv("extract", ws, srv.base_url, "--limit", "1")) == 0
    assert {k.split("#")[0] for k in records(ws / "extract" / "records.jsonl")} == {first["key"]}
    prices = tmp_path / "prices.yaml"
    prices.write_text("vlm: {input: 1.0, output: 4.0}\n")
    budget = ["--price_file", str(prices)]
    assert run(*step_argv("extract", ws, srv.base_url, *budget, "--concurrency", "1", "--max_cost", "0.01")) == 4
    assert "budget reached" in capsys.readouterr().err
    n = len(records(ws / "extract" / "records.jsonl"))
    assert run(*step_argv("extract", ws, srv.base_url, *budget, "--max_cost", "100")) == 0
    recs = records(ws / "extract" / "records.jsonl")
    assert len(recs) > n and sum(1 + len(s["layouts"]) for s in lines(ws / "sources.jsonl")) == len(recs)
    card = json.loads((ws / "extract" / "step_card.json").read_text())
    priced = [r["cost_usd"] for r in recs.values() if r.get("cost_usd") is not None]
    assert card["totals"]["cost_usd"] == pytest.approx(sum(priced), abs=1e-5)
    stopped = card["history"][1]  # the run stopped by the budget is there, with what it spent
    assert [h["status"] for h in card["history"]] == ["finished", "stopped", "finished"]
    assert "budget reached" in stopped["reason"] and stopped["cost_usd"] > 0 and stopped["new_records"]["ok"] >= 1
    assert sum(h["cost_usd"] for h in card["history"][1:]) == pytest.approx(card["totals"]["cost_usd"], abs=1e-5)
    # --limit, budgets and concurrency are operational (three invocations in the history); the prompt role is not
    assert [h["settings"]["limit"] for h in card["history"]] == [1, None, None]
    before = (ws / "extract" / "step_card.json").read_bytes()
    assert run(*step_argv("extract", ws, srv.base_url, "--extract_prompt_role", "user")) == 2
    assert 'extract_prompt_role: first run "system", this run "user"' in capsys.readouterr().err
    assert (ws / "extract" / "step_card.json").read_bytes() == before


def test_a_step_whose_input_is_not_ready_says_so_and_exits_non_zero(tmp_path, demo, oracle, openai_server, capsys):
    """``synthesize`` with no image extracted refuses (status 2, no request) and names the command to run first;
    with some images extracted it synthesizes those and exits 1, naming the command again; ``validate`` with no
    synthesized image refuses the same way (never status 0 with ``"items": 0``)."""
    ws = sources_ws(tmp_path, demo)
    srv = openai_server(oracle.script())
    (ws / "extract").mkdir()
    (ws / "extract" / "records.jsonl").write_text("")
    capsys.readouterr()
    assert run(*step_argv("synthesize", ws, srv.base_url)) == 2 and srv.count == 0
    err = capsys.readouterr().err
    assert "no image is ready for synthesis: 6 of 6 image(s) wait for their E.1 extraction" in err
    assert f"run 'python -m insight_o3.scripts.build_o3_bench extract --output_dir {ws}" in err
    assert not (ws / "synthesize" / "records.jsonl").exists() or not records(ws / "synthesize" / "records.jsonl")
    (ws / "synthesize" / "records.jsonl").unlink(missing_ok=True)

    assert run(*step_argv("extract", ws, srv.base_url, "--limit", "2")) == 0
    capsys.readouterr()
    assert run(*step_argv("synthesize", ws, srv.base_url)) == 1
    out, err = capsys.readouterr()
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["ok"] == summary["items"] >= 1 and summary["images_waiting_for_extraction"] == 6 - summary["ok"]
    assert f"{6 - summary['ok']} of 6 image(s) wait for their E.1 extraction" in err
    assert f"extract --output_dir {ws} --model vlm --api_base_url {srv.base_url}" in err

    empty = tmp_path / "empty"
    assert run(*sources_argv(empty, demo[0])) == 0
    (empty / "synthesize").mkdir()
    (empty / "synthesize" / "records.jsonl").write_text("")
    capsys.readouterr()
    assert run("validate", "--output_dir", str(empty)) == 2
    err = capsys.readouterr().err
    assert "no image is synthesized yet (6 not synthesized, 0 failed)" in err
    assert f"python -m insight_o3.scripts.build_o3_bench synthesize --output_dir {empty}" in err
    assert not (empty / "validate" / "candidates.jsonl").exists()


def test_review_and_release_refuse_a_partly_filtered_set(tmp_path, demo, oracle, openai_server, capsys):
    """``review page`` after a ``filter --limit`` run refuses (status 2, naming how many candidates are unfiltered
    and the command to run) unless ``--allow_partial``, which says how many it leaves out;
    ``release --require_all_decided`` refuses while the filter has not run on every candidate and while a kept item
    has no decision (the filter ran again after ``review apply``)."""
    ws = sources_ws(tmp_path, demo)
    srv = openai_server(oracle.script())
    for step in ("extract", "synthesize"):
        assert run(*step_argv(step, ws, srv.base_url)) == 0
    assert run("validate", "--output_dir", str(ws)) == 0
    n = len(lines(ws / "validate" / "candidates.jsonl"))
    assert run(*step_argv("filter", ws, srv.base_url, "--limit", "4")) == 0
    capsys.readouterr()
    assert run("review", "page", "--output_dir", str(ws)) == 2
    err = capsys.readouterr().err
    assert f"{n - 4} of {n} candidate(s) have not been through the difficulty filter (0 failed, {n - 4} not run" in err
    assert f"python -m insight_o3.scripts.build_o3_bench filter --output_dir {ws} --solver" in err
    assert "--allow_partial" in err and not (ws / "review").exists()
    assert run("review", "page", "--output_dir", str(ws), "--allow_partial") == 0
    out, err = capsys.readouterr()
    assert json.loads(out.strip().splitlines()[-1])["unfiltered"] == n - 4
    assert f"warning: {n - 4} of {n} candidate(s) have not been through the difficulty filter" in err
    decide(ws, rejects=0, edits=0)
    assert run("review", "apply", "--output_dir", str(ws)) == 0
    capsys.readouterr()
    assert run("release", "--output_dir", str(ws), "--require_all_decided") == 2
    err = capsys.readouterr().err
    assert f"{n - 4} of {n} candidate(s) have not been through the difficulty filter" in err
    assert not (ws / "release" / "metadata.jsonl").exists()

    assert run(*step_argv("filter", ws, srv.base_url)) == 0  # the rest: new kept items, not in reviewed.jsonl
    late = {it["item_id"] for it in lines(ws / "filter" / "kept.jsonl")} - {
        r["item_id"] for r in lines(ws / "review" / "reviewed.jsonl")
    }
    assert late, "the demo should keep some of the items filtered late"
    capsys.readouterr()
    assert run("release", "--output_dir", str(ws), "--require_all_decided") == 2
    assert f"{len(late)} kept item(s) have no review decision" in capsys.readouterr().err
    assert run("release", "--output_dir", str(ws)) == 0  # without the flag: released, with a note
    assert f"{len(late)} kept item(s) have no review decision" in capsys.readouterr().err


def test_one_step_at_a_time_per_workspace_and_a_refused_key(tmp_path, demo, openai_server, capsys):
    ws = sources_ws(tmp_path, demo)
    lock = acquire(ws, "another step")
    try:
        assert run("validate", "--output_dir", str(ws)) == 5
    finally:
        lock.release()
    srv = openai_server(refuse(401))
    assert run(*step_argv("extract", ws, srv.base_url)) == 4
    err = capsys.readouterr().err
    assert "extractor endpoint answered HTTP 401" in err and KEY not in err
    assert run("validate", "--output_dir", str(tmp_path / "empty")) == 2
    assert "sources.jsonl not found: run the 'sources' step first" in capsys.readouterr().err


def test_python_module_and_help(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "insight_o3.scripts.build_o3_bench", "review", "apply", "--help"],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0 and "--decisions" in r.stdout
    shutil.rmtree(tmp_path, ignore_errors=True)


def test_filter_refuses_a_named_key_variable_that_is_unset(tmp_path, demo, oracle, openai_server, monkeypatch, capsys):
    """``--solver MODEL,URL,VAR`` with ``VAR`` unset stops before the first item (status 4, the variable named),
    as the README says."""
    ws = sources_ws(tmp_path, demo)
    srv = openai_server(oracle.script())
    for step in ("extract", "synthesize"):
        assert run(*step_argv(step, ws, srv.base_url)) == 0
    assert run("validate", "--output_dir", str(ws)) == 0
    monkeypatch.delenv("MY_UNSET_KEY", raising=False)
    argv = step_argv("filter", ws, srv.base_url, "--solver", f"extra-model,{srv.base_url},MY_UNSET_KEY")
    assert run(*argv) == 4
    assert "$MY_UNSET_KEY is not set" in capsys.readouterr().err
    assert not (ws / "filter" / "records.jsonl").exists() or not records(ws / "filter" / "records.jsonl")
