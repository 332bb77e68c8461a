"""The round driver's bookkeeping, in seconds: the data engine's demo endpoint (insight_o3.reasoning_data.demo:
planted chains kept or rejected at each tier) plays the served policy, the judge and the scorer, and a stand-in
trainer records what it was asked (the real trainer and vLLM: tests/training/test_dpo_rounds.py). Round 2 starts
from round 1's export; a round stopped in training resumes without asking any question again; the settings are
fixed by the first run; fewer rounds than done, no pairs and a bad pairs row are refused by name."""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from insight_o3.endpoints.scripted_server import Call, Reply, ScriptedOpenAIServer, error
from insight_o3.evaluation.samples import load_samples
from insight_o3.jobs.integrity import FewerThanHeld, SettingsChanged
from insight_o3.reasoning_data.demo import PLANS, ScriptedEngine, demo_questions
from insight_o3.reasoning_data.settings import GenerateSettings, ModelAccess, RunControls
from training.dpo import rounds
from training.dpo.rounds import RoundsConfig, RoundStopped

#: a stand-in for ``python -m training.dpo.train``: argv after ``-c CODE`` is the trainer's; it fails while a
#: ``fail`` file holds a number above 0 (decremented), else writes the export and one metrics line
FAKE_TRAINER = r"""
import json, os, sys
args = dict(zip(sys.argv[1::2], sys.argv[2::2]))
out, model = args["--output_dir"], args["--export_dir"]
with open(os.path.join(os.path.dirname(out), "calls.jsonl"), "a") as f:
    f.write(json.dumps(sys.argv[1:]) + "\n")
fail = os.path.join(os.path.dirname(os.path.dirname(out)), "fail")
left = int(open(fail).read()) if os.path.exists(fail) else 0
if left > 0:
    open(fail, "w").write(str(left - 1))
    sys.exit(1)
os.makedirs(model, exist_ok=True)
with open(os.path.join(out, "metrics.jsonl"), "a") as f:
    f.write(json.dumps({"step": 1, "loss": 0.69, "rewards/margins": 0.0}) + "\n")
    f.write(json.dumps({"step": 2, "loss": 0.5, "rewards/margins": 0.4}) + "\n")
json.dump({"global_step": 2}, open(os.path.join(model, "dpo_export.json"), "w"))
"""


class Endpoint:
    """The demo's scripted engine for both rounds' seeds (round r generates with seed + r - 1), routed by model."""

    def __init__(self, meta: Path, img_dir: Path) -> None:
        samples = load_samples(str(meta), str(img_dir))
        keys = [f"{s.key}#{k}" for s in samples for k in range(len(PLANS))]
        rows = [json.loads(line) for line in meta.read_text().splitlines() if line.strip()]
        self.engines = [ScriptedEngine(rows, keys, seed=s) for s in (0, 1, 2)]
        self.models: list[str] = []
        self.judge_down = False

    def __call__(self, req: dict, call: Call) -> Reply:
        model = str(req.get("model"))
        self.models.append(model)
        if model.startswith("policy-round-"):
            seed = int(req.get("seed") or -1)
            engine = next((e for e in self.engines if seed in e._by_seed), self.engines[0])
            return engine.generator(req, call)
        if model == "judge":
            return error(503, "the judge is overloaded") if self.judge_down else ScriptedEngine.checker(req, call)
        if model == "scorer":
            return self.engines[0].scorer(req, call)
        return error(404, model)


@pytest.fixture
def setup(tmp_path, monkeypatch):
    meta = demo_questions(tmp_path / "inputs", num_images=2, questions=1, seed=0, min_side=300)
    endpoint = Endpoint(meta, tmp_path / "inputs")
    with ScriptedOpenAIServer(endpoint, keep_bodies=False) as srv:
        served: list[tuple[str, str]] = []

        @contextmanager
        def fake_served(model_dir: str, name: str, s: object, run_dir: str) -> Iterator[str]:
            served.append((model_dir, name))
            yield srv.base_url

        monkeypatch.setattr(rounds, "served", fake_served)
        from insight_o3.endpoints.endpoint import Endpoint as Api

        api = Api(base_url=srv.base_url, api_key="EMPTY", max_retries=0)
        cfg = RoundsConfig(
            work=str(tmp_path / "runs"),
            base_model=str(tmp_path / "base"),
            ann_file=str(meta),
            img_dir=str(tmp_path / "inputs"),
            judge=ModelAccess(model="judge", api=api),
            scorer=ModelAccess(model="scorer", api=api),
            rounds=2,
            generate=GenerateSettings(num_chains=2),  # the demo's plans 0 and 1: a good chain, a wrong answer
            run=RunControls(concurrency=4, progress=False, image_workers=0),
            launcher=(sys.executable, "-c", FAKE_TRAINER),
        )
        yield cfg, endpoint, served, tmp_path


def _calls(cfg: RoundsConfig, n: int) -> list[list[str]]:
    path = Path(cfg.work) / f"round_{n}" / "calls.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_rounds_chain_policies_and_a_stopped_training_resumes_without_asking_again(setup):
    cfg, endpoint, served, tmp = setup
    (Path(cfg.work)).mkdir(parents=True)
    (Path(cfg.work) / "fail").write_text("1")  # round 1's first training run fails (a killed trainer)
    with pytest.raises(RoundStopped) as stopped:
        rounds.run(cfg)
    assert "round 1: training exited with status 1" in str(stopped.value) and stopped.value.code == 1
    asked = len(endpoint.models)
    r1 = json.loads((Path(cfg.work) / "round_1" / "round.json").read_text())
    assert list(r1["stages"]) == ["generate", "check", "score", "export"] and r1["status"] == "running"

    records = rounds.run(cfg)
    assert [r["status"] for r in records] == ["done", "done"]
    # nothing of round 1 asked again: the rest are round 2's requests
    assert all(m != "policy-round-1" for m in endpoint.models[asked:])
    assert served == [
        (str(tmp / "base"), "policy-round-1"),
        (str(Path(cfg.work) / "round_1" / "model"), "policy-round-2"),
    ]
    # round 1 trained twice (the failure, the resume), round 2 once, from round 1's export
    assert len(_calls(cfg, 1)) == 2 and len(_calls(cfg, 2)) == 1
    call = dict(zip(_calls(cfg, 2)[0][::2], _calls(cfg, 2)[0][1::2]))
    assert call["--model"] == str(Path(cfg.work) / "round_1" / "model")
    assert call["--pairs"] == str(Path(cfg.work) / "round_2" / "data" / "export" / "dpo_pairs.jsonl")
    assert json.loads(Path(call["--settings"]).read_text())["learning_rate"] == 5e-6
    # each round's pairs come from its own chains (the planted good chain vs. the wrong answer); seeds differ
    for r in records:
        assert r["stages"]["export"]["counts"]["dpo_pairs"] == 2  # one per question
        assert r["stages"]["train"]["metrics"]["rewards/margins"] == {"first": 0.0, "last": 0.4, "n": 2}
    assert [r["stages"]["generate"]["seed"] for r in records] == [0, 1]

    # done: a rerun serves nothing, trains nothing
    before = (len(endpoint.models), len(served))
    rounds.run(cfg)
    assert (len(endpoint.models), len(served)) == before and len(_calls(cfg, 2)) == 1

    # the first run fixed the settings: another is refused (nothing written), and rounds may grow, not shrink
    with pytest.raises(SettingsChanged) as changed:
        rounds.run(dataclasses.replace(cfg, generate=GenerateSettings(num_chains=3)))
    assert "generate_settings.num_chains: first run 2, this run 3" in str(changed.value)
    with pytest.raises(FewerThanHeld) as fewer:
        rounds.run(dataclasses.replace(cfg, rounds=1))
    assert "rounds: the directory holds 2, this run 1" in str(fewer.value)
    before = len(served)
    records = rounds.run(dataclasses.replace(cfg, rounds=3))  # round 3 starts from round 2's export
    assert len(records) == 3 and served[before:] == [(str(Path(cfg.work) / "round_2" / "model"), "policy-round-3")]


def test_a_stage_that_leaves_failed_items_stops_and_says_why(setup):
    cfg, endpoint, served, tmp = setup
    endpoint.judge_down = True
    with pytest.raises(RoundStopped) as stopped:
        rounds.run(cfg)
    message = str(stopped.value)
    assert message.startswith("round 1: check left 4 item(s) failed (4x ") and stopped.value.code == 1
    assert "the judge is overloaded" in message and message.endswith("; run again to retry them")
    endpoint.judge_down = False  # the judge is back: the rerun retries the four items and goes on
    assert [r["status"] for r in rounds.run(cfg)] == ["done", "done"]


def test_a_round_without_pairs_stops_and_says_why(setup):
    from insight_o3.reasoning_data.settings import ExportSettings

    cfg, endpoint, served, tmp = setup
    cfg = dataclasses.replace(cfg, export=ExportSettings(min_score=100))  # nothing kept: no chosen chain
    with pytest.raises(RoundStopped) as stopped:
        rounds.run(cfg)
    assert "round 1: the assessment kept no chosen/rejected pair" in str(stopped.value) and stopped.value.code == 2


def test_the_command_maps_errors_to_exit_codes_and_takes_keys_from_the_environment(setup, monkeypatch, capsys):
    cfg, endpoint, served, tmp = setup
    monkeypatch.setenv("JUDGE_API_KEY", "sk-judge-secret")
    base = ["--work", cfg.work, "--base_model", cfg.base_model, "--ann_file", cfg.ann_file, "--img_dir", cfg.img_dir]
    base += ["--judge_model", "judge", "--scorer_model", "scorer"]
    args = rounds.build_parser().parse_args(base)
    built = rounds.config_from_args(args)
    assert built.judge.api.api_key == "sk-judge-secret" and "sk-judge-secret" not in repr(built)
    assert built.dpo.learning_rate == 5e-6 and built.launcher[:2] == ("accelerate", "launch")
    assert rounds.main([*base, "--generation_kwargs", "[1]"]) == 2
    assert "--generation_kwargs must be a JSON object" in capsys.readouterr().err
    bad = tmp / "dpo.json"
    bad.write_text(json.dumps({"lr": 1}))
    assert rounds.main([*base, "--dpo_settings", str(bad)]) == 2
    assert f"{bad}: unknown DPO setting(s) lr" in capsys.readouterr().err
    assert not (Path(cfg.work) / rounds.CARD).exists()
