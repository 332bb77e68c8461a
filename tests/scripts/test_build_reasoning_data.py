"""Insight-V's data engine (``build_reasoning_data``): the offline demo end to end with a bad chain planted for every
tier (malformed, wrong answer, low score) and each rejected where planted; a generate step killed by SIGKILL and
resumed ends with the same files, byte for byte, as one never killed; settings fixed by the first run; the export's
ranking, summary mix and DPO pairs (TRL's vision format, loaded with ``datasets``); the tier-2 reply reader."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from insight_o3.agents import insight_v as iv
from insight_o3.endpoints.endpoint import Endpoint
from insight_o3.endpoints.scripted_server import ScriptedOpenAIServer
from insight_o3.evaluation.samples import load_samples
from insight_o3.jobs.controls import RunControls
from insight_o3.jobs.integrity import SettingsChanged
from insight_o3.reasoning_data import engine
from insight_o3.reasoning_data.assessment import parse_score
from insight_o3.reasoning_data.demo import CHECKER, GENERATOR, PLANS, SCORER, ScriptedEngine, demo_questions
from insight_o3.reasoning_data.export import Assessed, Tier, build
from insight_o3.reasoning_data.settings import ExportSettings, GenerateSettings, ModelAccess
from insight_o3.scripts import build_reasoning_data, build_reasoning_data_demo
from tests.support.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]
RUN = RunControls(progress=False, concurrency=4, image_workers=0)


@pytest.fixture(scope="module")
def questions(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("rd_inputs")
    return demo_questions(root, num_images=1, questions=2, min_side=300), root


def _engine(meta: Path, root: Path, chains: int = len(PLANS)) -> ScriptedEngine:
    rows = [json.loads(x) for x in meta.read_text().splitlines()]
    keys = [f"{s.key}#{k}" for s in load_samples(str(meta), str(root)) for k in range(chains)]
    return ScriptedEngine(rows, keys)


def _lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def _access(model: str, url: str) -> ModelAccess:
    return ModelAccess(model=model, api=Endpoint(base_url=url, api_key="EMPTY", max_retries=0))


# ------------------------------------------------------------------------------------------- the demo, end to end
def test_the_demo_rejects_each_planted_bad_chain_at_its_tier(tmp_path, capsys):
    out = tmp_path / "demo"
    argv = ["--output_dir", str(out), "--num_images", "1", "--questions_per_image", "1", "--min_side", "300"]
    assert build_reasoning_data_demo.main(argv) == 0
    printed = capsys.readouterr().out
    for tier in ("tier 0 (format) rejected 1", "tier 1 (answer) rejected 1", "tier 2 (score) rejected 1"):
        assert tier in printed
    work = out / "work"
    ranking = _lines(work / "export" / "ranking.jsonl")
    (q,) = ranking
    tiers = {c["key"].rsplit("#", 1)[1]: c["tier"] for c in q["chains"]}
    assert tiers == {"0": "kept", "1": "wrong_answer", "2": "low_score", "3": "kept", "4": "kept", "5": "malformed"}
    gen = {r["chain"]: r for r in _lines(work / "generate" / "records.jsonl")}
    assert gen[3]["repairs"] and gen[3]["status"] == "ok"  # the broken step, repaired with the release's prompt
    assert gen[4]["attempts"][0]["problem"] == "no final_answer after 16 steps (the cap)" and gen[4]["status"] == "ok"
    assert gen[5]["status"] == "malformed" and len(gen[5]["attempts"]) == 2
    assert gen[5]["problem"].startswith("a step failed 3 times")
    checks = {r["sample_key"].rsplit("#", 1)[1]: r for r in _lines(work / "check" / "records.jsonl")}
    assert checks["1"]["verdict"] == [0] and not checks["1"]["passed"] and "5" not in checks
    scores = {r["sample_key"].rsplit("#", 1)[1]: r for r in _lines(work / "score" / "records.jsonl")}
    assert scores["2"]["score"] == 18 and scores["0"]["score"] == 88 and scores["3"]["attempts"] == 2
    assert set(scores) == {"0", "2", "3", "4"}  # only what passed tier 1
    card = json.loads((work / "score" / "step_card.json").read_text())
    assert card["rubric"] and card["fixed_settings"]["scorer_model"] == SCORER
    # the sets the trainers read
    reason = json.loads((work / "export" / "reason_sft.json").read_text())
    assert len(reason) == 1 and reason[0]["id"].endswith(("#0", "#3", "#4"))
    human, gpt = reason[0]["conversations"]
    assert human["value"].startswith("<image>\n") and human["value"].endswith(iv.REASON_SUFFIX)
    assert gpt["value"].startswith("<thoughts>\n") and gpt["value"].endswith("\n</thoughts>")
    summary = json.loads((work / "export" / "summary_sft.json").read_text())
    flawed = [r["chain_tier"] for r in summary if r["chain_tier"] != "kept"]
    assert len(summary) == 4 and flawed in (["wrong_answer"], ["low_score"])  # round(3 * 0.3 / 0.7) = 1 flawed
    for r in summary:
        assert r["conversations"][0]["value"].startswith(iv.SUMMARY_PREFIX + "<image>\n")
    (pair,) = _lines(work / "export" / "dpo_pairs.jsonl")
    assert pair["rejected_tier"] == "wrong_answer" and pair["chosen_tier"] == "kept"
    # a rerun asks nothing (everything is recorded) and writes the same sets
    before = {p.name: p.read_bytes() for p in (work / "export").glob("*.json*") if p.name != "export_card.json"}
    assert build_reasoning_data_demo.main(argv) == 0
    assert "(0 requests" in capsys.readouterr().out
    assert before == {p.name: p.read_bytes() for p in (work / "export").glob("*.json*") if p.name != "export_card.json"}


def test_dpo_pairs_load_as_trl_vision_preference_data(tmp_path, questions):
    datasets = pytest.importorskip("datasets")
    meta, root = questions
    eng = _engine(meta, root, chains=3)  # good, wrong answer, hallucinated
    with ScriptedOpenAIServer(eng.script()) as srv:
        work = tmp_path / "w"
        gen = engine.generate(
            work, str(meta), str(root), _access(GENERATOR, srv.base_url), GenerateSettings(num_chains=3), RUN
        )
        assert gen.exit_code == 0
        assert engine.check(work, _access(CHECKER, srv.base_url), run=RUN).exit_code == 0
        assert engine.score(work, _access(SCORER, srv.base_url), run=RUN).exit_code == 0
    out = engine.export(work, ExportSettings(pairs_per_question=2))
    ds = datasets.load_dataset(
        "json", data_files=out.files["dpo_pairs.jsonl"], split="train", cache_dir=str(tmp_path / "hf_cache")
    )
    ds = ds.cast_column("images", datasets.Sequence(datasets.Image()))
    assert len(ds) == 2  # per question: its one kept chain against the wrong answer
    row = ds[0]
    assert row["images"][0].size[0] > 0
    assert row["prompt"][0]["role"] == "user" and row["prompt"][0]["content"][0]["type"] == "image"
    text = row["prompt"][0]["content"][1]["text"]
    assert text.startswith("\n") and text.endswith(iv.REASON_SUFFIX)
    assert row["chosen"][0]["role"] == row["rejected"][0]["role"] == "assistant"
    assert row["chosen"][0]["content"][0]["text"] != row["rejected"][0]["content"][0]["text"]
    # settings are fixed by the first run of each step
    with pytest.raises(SettingsChanged, match="num_chains"):
        engine.generate(
            work, str(meta), str(root), _access(GENERATOR, "http://127.0.0.1:9/v1"), GenerateSettings(num_chains=2), RUN
        )
    with pytest.raises(SettingsChanged, match="flawed_ratio"):
        engine.export(work, ExportSettings(pairs_per_question=2, flawed_ratio=0.5))


# ------------------------------------------------------------------------------------------- kill + resume
def _generate_argv(work: Path, meta: Path, root: Path, url: str) -> list[str]:
    return (
        ["generate", "--output_dir", str(work), "--ann_file", str(meta), "--img_dir", str(root), "--model", GENERATOR]
        + ["--api_base_url", url, "--api_key", "EMPTY", "--num_chains", "3", "--no_progress", "--max_retries", "0"]
        + ["--concurrency", "2", "--image_workers", "0"]
    )


def test_generate_killed_and_resumed_writes_the_same_bytes(tmp_path, questions):
    meta, root = questions
    eng = _engine(meta, root, chains=3)
    clean, killed = tmp_path / "clean", tmp_path / "killed"
    with ScriptedOpenAIServer(eng.script()) as srv:
        assert build_reasoning_data.main(_generate_argv(clean, meta, root, srv.base_url)) == 0
    log = killed / "generate" / "records.jsonl"
    with ScriptedOpenAIServer(eng.script(), block_after=12) as srv:
        env = {k: v for k, v in os.environ.items() if not k.endswith(("_API_KEY", "_BASE_URL"))}
        env["PYTHONPATH"] = str(REPO)
        argv = _generate_argv(killed, meta, root, srv.base_url)
        proc = subprocess.Popen(
            [sys.executable, "-m", "insight_o3.scripts.build_reasoning_data", *argv],
            cwd=REPO,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_until(lambda: srv.count >= 12 + 2 or proc.poll() is not None, 120, "two requests held by the server")
            assert proc.poll() is None, "the step ended before it could be killed"
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        done = len(_lines(log)) if log.exists() else 0
        assert done < 6  # killed with chains left to do
        with open(log, "ab") as f:  # the worst case too: a torn half-written line
            f.write(b'{"sample_key": "torn", "sta')
        srv.release()
        assert build_reasoning_data.main(argv) == 0
    assert log.read_bytes() == (clean / "generate" / "records.jsonl").read_bytes()
    history = json.loads((killed / "generate" / "step_card.json").read_text())["history"]
    assert [h["status"] for h in history] == ["unfinished", "finished"]


# ------------------------------------------------------------------------------------------- export rules
def _chain(q: str, k: int, steps: int = 2) -> dict:
    return {
        "sample_key": f"{q}#{k}",
        "question_key": q,
        "question": f"question {q}",
        "options": "A. x\nB. y",
        "answer": "B",
        "image": "img.png",
        "image_path": "img.png",
        "steps": [
            {"count": i + 1, "title": f"T{i}", "content": f"c{k}.{i}", "next_action": "continue"} for i in range(steps)
        ],
    }


def test_export_ranks_mixes_and_pairs():
    a = [
        Assessed(_chain("q", 0), Tier.KEPT, 90),
        Assessed(_chain("q", 1), Tier.KEPT, 70),
        Assessed(_chain("q", 2), Tier.LOW_SCORE, 60),
        Assessed(_chain("q", 3), Tier.LOW_SCORE, 10),
        Assessed(_chain("q", 4), Tier.WRONG_ANSWER, None),
        Assessed(_chain("q", 5), Tier.MALFORMED, None),
        Assessed(_chain("r", 0), Tier.KEPT, 80),
        Assessed(_chain("r", 1), Tier.LOW_SCORE, 75),  # within the margin of the only kept one: no pair
    ]
    rows = build(a, ExportSettings(min_score=65, keep_top=1, flawed_ratio=0.5, pairs_per_question=3, dpo_min_margin=20))
    assert [r["id"] for r in rows["reason"]] == ["q#0", "r#0"]
    assert [c["key"] for c in rows["ranking"][0]["chains"]] == ["q#0", "q#1", "q#2", "q#3", "q#4", "q#5"]
    pairs = [(p["chosen_key"], p["rejected_key"]) for p in rows["dpo"]]
    assert pairs == [("q#0", "q#4"), ("q#1", "q#3")]  # worst first; r#1 is only 5 points below r#0
    kept = [r for r in rows["summary"] if r["chain_tier"] == "kept"]
    flawed = [r for r in rows["summary"] if r["chain_tier"] != "kept"]
    assert len(kept) == 3 and len(flawed) == 3  # half of the set, as far as flawed chains go
    assert all(r["conversations"][1]["value"] == "B" for r in rows["summary"])
    assert rows["counts"]["tiers"] == {"kept": 3, "low_score": 3, "wrong_answer": 1, "malformed": 1, "pending": 0}
    few = build(a, ExportSettings(flawed_ratio=0.9))
    assert few["counts"]["summary_sft_flawed"] == 4  # every flawed chain there is


def test_a_pair_never_has_the_same_reasoning_on_both_sides():
    same = {**_chain("q", 3), "steps": _chain("q", 0)["steps"]}  # a wrong answer reasoned word for word as q#0
    a = [
        Assessed(_chain("q", 0), Tier.KEPT, 90),
        Assessed(_chain("q", 1), Tier.KEPT, 80),
        Assessed(_chain("q", 2), Tier.WRONG_ANSWER, None),
        Assessed(same, Tier.WRONG_ANSWER, None),
        Assessed(_chain("r", 0), Tier.KEPT, 80),
        Assessed({**_chain("r", 1), "steps": _chain("r", 0)["steps"]}, Tier.WRONG_ANSWER, None),
    ]
    rows = build(a, ExportSettings(pairs_per_question=2))
    pairs = [(p["chosen_key"], p["rejected_key"]) for p in rows["dpo"]]
    # q#0's worst loser (q#3) reasons as it does: q#0 takes q#2, and q#1 the q#3 that differs from it; r has none
    assert pairs == [("q#0", "q#2"), ("q#1", "q#3")]
    assert all(p["chosen"] != p["rejected"] for p in rows["dpo"])


@given(st.text(max_size=400))
def test_any_scorer_reply_gives_a_score_or_a_value_error(text):
    try:
        out = parse_score(text)
    except ValueError:
        return
    assert 1 <= out["score"] <= 100 and set(out) <= {"logic", "hallucination", "completeness", "score"}


def test_scorer_replies():
    assert parse_score('Here: {"logic": 90, "hallucination": 80.6, "completeness": 70, "score": 85}.') == {
        "logic": 90,
        "hallucination": 81,
        "completeness": 70,
        "score": 85,
    }
    for bad in ("no json", '{"score": 0}', '{"score": "90"}', '{"score": true}', "[85]", '{"logic": 3}'):
        with pytest.raises(ValueError):
            parse_score(bad)


def test_a_step_without_its_input_is_bad_input_naming_what_to_run(tmp_path, capsys):
    argv = ["check", "--output_dir", str(tmp_path / "w"), "--judge_model", "j", "--judge_api_base_url", "http://x/v1"]
    assert build_reasoning_data.main(argv) == 2
    err = capsys.readouterr().err
    assert "generate/records.jsonl not found" in err and "'generate'" in err
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "q", "answer": "A", "image": "x.png"}\n{"question": 3\n')
    argv = ["generate", "--output_dir", str(tmp_path / "w"), "--ann_file", str(bad), "--img_dir", str(tmp_path)]
    assert build_reasoning_data.main([*argv, "--model", "m", "--api_base_url", "http://x/v1"]) == 2
    assert f"{bad}:2" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        build_reasoning_data.main([*argv, "--model", "m", "--num_chains", "0"])
    assert e.value.code == 2 and "num_chains" in capsys.readouterr().err
