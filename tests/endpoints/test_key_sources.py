"""No silent fallbacks: every endpoint's URL and key source is stated at the start; the judge asked on the model's
endpoint says so; a role's key borrowed from another role (the judge from ``$OPENAI_API_KEY``) is sent only to the
host that key belongs to, unless ``--allow_key_to_other_host``; the keyless demo's endpoints refuse a wrong model
name or a missing key as a real server does."""

from __future__ import annotations

import logging

import pytest

from insight_o3.demo.endpoints import DemoScripts
from insight_o3.endpoints.endpoint import SDK_DEFAULT_URL, KeyHostError, Sourced, borrowed_key, describe, host_of
from insight_o3.scripts import evaluate, rejudge
from tests.support import eval_bench as eb

KEY = "sk-model-abcdef0123456789"


@pytest.fixture
def env(monkeypatch):
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "JUDGE_API_KEY", "JUDGE_API_BASE_URL", "JUDGE_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_a_borrowed_key_goes_only_to_its_own_host():
    model = Sourced("http://127.0.0.1:8000/v1", "--api_base_url")
    key = Sourced(KEY, "--api_key")
    same = borrowed_key(
        "judge", Sourced("http://127.0.0.1:8000/other", "x"), Sourced(None, "none"), "model", model, key
    )
    assert same.value == KEY and "the model's key" in same.source
    nobody = Sourced(None, "none")
    other_port = borrowed_key("judge", Sourced("http://127.0.0.1:9000/v1", "x"), nobody, "model", model, key)
    assert other_port.value == KEY  # one host, another port: the same machine
    with pytest.raises(KeyHostError, match="judge.example"):
        borrowed_key("judge", Sourced("http://judge.example/v1", "x"), nobody, "model", model, key)
    allowed = borrowed_key("judge", Sourced("https://judge.example/v1", "x"), nobody, "model", model, key, True)
    assert allowed.value == KEY
    own = Sourced("sk-judge", "$JUDGE_API_KEY")
    assert borrowed_key("judge", Sourced("http://elsewhere/v1", "x"), own, "model", model, key) is own
    assert host_of(None) == host_of(SDK_DEFAULT_URL) == "api.openai.com"
    line = describe("judge", Sourced(None, "none"), Sourced(KEY, "$OPENAI_API_KEY"))
    assert KEY not in line and "SDK's default" in line and "$OPENAI_API_KEY" in line
    assert KEY not in repr(key)


def test_the_judge_on_another_host_never_gets_the_models_key_variable(env, tmp_path, openai_server, capsys):
    """$OPENAI_API_KEY (whose $OPENAI_BASE_URL is the model's server) and $JUDGE_API_BASE_URL on another host: refused
    before any request, the judge's server never sees the key; the flag sends it."""
    ann, img = eb.make_bench(tmp_path / "bench")
    model = openai_server(eb.model_script())
    judge = openai_server(eb.judge_script())
    env.setenv("OPENAI_API_KEY", KEY)
    env.setenv("OPENAI_BASE_URL", model.base_url)
    env.setenv("JUDGE_API_BASE_URL", judge.base_url.replace("127.0.0.1", "localhost"))
    argv = ["--ann_file", str(ann), "--img_dir", str(img), "--eval_name", "e", "--model", "m", "--no_progress"]
    argv += ["--output_dir", str(tmp_path / "out"), "--limit", "1"]
    with pytest.raises(SystemExit) as e:
        evaluate.main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and "$OPENAI_API_KEY" in err and "allow_key_to_other_host" in err
    assert KEY not in err and judge.count == 0 and model.count == 0


def test_every_endpoint_is_stated_at_the_start_and_the_judge_on_the_models_endpoint_warns(env, caplog):
    env.setenv("OPENAI_API_KEY", KEY)
    with caplog.at_level(logging.INFO, logger="insight_o3.evaluate"):
        evaluate.parse_args(["--benchmark", "vstar", "--model", "m", "--api_base_url", "http://127.0.0.1:8000/v1"])
    lines = [r for r in caplog.records if "endpoints" in r.getMessage() or "judge:" in r.getMessage()]
    text = "\n".join(r.getMessage() for r in lines)
    assert "model: http://127.0.0.1:8000/v1 (from --api_base_url); key from $OPENAI_API_KEY" in text
    judge = next(r for r in lines if "judge:" in r.getMessage())
    assert judge.levelno == logging.WARNING and "asked on the model's endpoint" in judge.getMessage()
    assert "key from $OPENAI_API_KEY (the model's key)" in judge.getMessage()
    assert KEY not in text


def test_rejudge_borrows_openai_api_key_only_where_it_belongs(env, capsys):
    env.setenv("OPENAI_API_KEY", KEY)
    env.setenv("JUDGE_API_BASE_URL", "http://judge.example:9/v1")
    p = rejudge.build_parser()
    a = p.parse_args(["outputs/eval/x", "--judge_model", "j"])
    with pytest.raises(SystemExit):
        rejudge._per_judge(p, a)
    assert "api.openai.com" in capsys.readouterr().err  # where $OPENAI_API_KEY belongs ($OPENAI_BASE_URL unset)
    a = p.parse_args(["outputs/eval/x", "--judge_model", "j", "--allow_key_to_other_host"])
    assert rejudge._per_judge(p, a)[0].judge_api_key == KEY


def _row() -> dict:
    return {
        "question_id": "q1", "question": "Which bar is tallest?", "answer": "B", "img_width": 100, "img_height": 80,
        "target_layouts": [1], "layout_infos": {"1": {"bbox": [10, 20, 30, 40]}},
    }  # fmt: skip


def test_the_demo_endpoints_refuse_a_wrong_model_name_and_a_missing_key():
    import openai

    from insight_o3.endpoints.scripted_server import ScriptedOpenAIServer

    names = {"model": "scripted-demo-model", "judge": "scripted-demo-judge"}
    scripts = DemoScripts([_row()], names=names, require_key=True)
    msgs = [{"role": "user", "content": "Which bar is tallest?"}]
    with ScriptedOpenAIServer(scripts.judge) as judge, ScriptedOpenAIServer(scripts.model) as model:
        wired_wrong = openai.OpenAI(base_url=judge.base_url, api_key="scripted-demo-key", max_retries=0)
        with pytest.raises(openai.NotFoundError, match="scripted-demo-model"):  # the model pointed at the judge
            wired_wrong.chat.completions.create(model="scripted-demo-model", messages=msgs)
        keyless = openai.OpenAI(base_url=model.base_url, api_key="EMPTY", max_retries=0)
        with pytest.raises(openai.AuthenticationError, match="missing API key"):
            keyless.chat.completions.create(model="scripted-demo-model", messages=msgs)
        right = openai.OpenAI(base_url=model.base_url, api_key="scripted-demo-key", max_retries=0)
        assert right.chat.completions.create(model="scripted-demo-model", messages=msgs).choices[0].message.content


def test_evaluate_pointed_at_the_demos_judge_port_stops_instead_of_scoring_zero(tmp_path, monkeypatch, capsys):
    """A model URL that is the judge's port (a wiring mistake that would score accuracy 0.0 with status 0): the
    first request is refused (404: no such model there) and the run stops, status 4, saying why."""
    from insight_o3.endpoints.scripted_server import ScriptedOpenAIServer
    from insight_o3.scripts import make_demo_bench
    from insight_o3.scripts.demo import DEMO_NAMES

    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "JUDGE_API_KEY", "JUDGE_API_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    bench = tmp_path / "bench"
    assert make_demo_bench.main(["--output_dir", str(bench), "--num_images", "1", "--num_questions", "2"]) == 0
    scripts = DemoScripts.from_metadata(bench / "metadata.jsonl", names=dict(DEMO_NAMES), require_key=True)
    with ScriptedOpenAIServer(scripts.judge) as judge:
        argv = [
            "--ann_file", str(bench / "metadata.jsonl"), "--img_dir", str(bench), "--eval_name", "wired",
            "--output_dir", str(tmp_path / "out"), "--model", "scripted-demo-model", "--api_base_url", judge.base_url,
            "--api_key", "scripted-demo-key", "--judge_model", "scripted-demo-judge", "--judge_api_base_url",
            judge.base_url, "--judge_api_key", "scripted-demo-key", "--no_progress", "--image_workers", "0",
        ]  # fmt: skip
        assert evaluate.main(argv) == 4
    err = capsys.readouterr().err
    assert "404" in err and "model" in err


def test_check_reliability_sends_openai_api_key_only_where_it_belongs(env, tmp_path, openai_server, capsys, caplog):
    """The C.1 check's judge without a key of its own: $OPENAI_API_KEY (its $OPENAI_BASE_URL the checkers' server)
    is refused for a judge on another host, before any request, unless --allow_key_to_other_host; every endpoint is
    stated at the start, the key never."""
    from insight_o3.scripts import check_reliability
    from tests.support.reliability_bench import QWEN_KEY, make_pool, script

    srv = openai_server(script({}))
    env.setenv("OPENAI_API_KEY", KEY)
    env.setenv("OPENAI_BASE_URL", srv.base_url)
    env.setenv("QWEN_KEY", QWEN_KEY)
    env.setenv("JUDGE_API_BASE_URL", srv.base_url.replace("127.0.0.1", "localhost"))
    pool = make_pool(tmp_path)
    argv = [
        "--source_pool",
        str(pool),
        "--out_dir",
        str(tmp_path / "rel"),
        "--checker",
        f"qwen,{srv.base_url},QWEN_KEY",
    ]
    argv += ["--judge_model", "judge", "--max_retries", "0", "--no_progress"]
    with pytest.raises(SystemExit) as e:
        check_reliability.main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and "$OPENAI_API_KEY" in err and "localhost" in err and "allow_key_to_other_host" in err
    assert KEY not in err and srv.count == 0
    with caplog.at_level(logging.INFO):
        check_reliability.main([*argv, "--allow_key_to_other_host"])
    text = "\n".join(r.getMessage() for r in caplog.records if "endpoints" in r.getMessage())
    assert f"checker qwen: {srv.base_url} (from the --checker spec); key from $QWEN_KEY" in text
    assert (
        "judge: http://localhost" in text and "key from $OPENAI_API_KEY (the $OPENAI_BASE_URL endpoint's key)" in text
    )
    assert KEY not in text and QWEN_KEY not in text and srv.count > 0


def test_every_model_calling_command_states_its_endpoints_at_the_start(env, tmp_path, caplog):
    """build_o3_bench's model steps (extract, synthesize), evaluate_vsearch, build_region_localization and
    build_reasoning_data's generate/check/score each say where requests go and where the key comes from, first
    (here each then stops on its missing input); the key itself never. build_reasoning_data check borrows
    $OPENAI_API_KEY only on its own host."""
    from insight_o3.scripts import build_o3_bench, build_reasoning_data, build_region_localization, evaluate_vsearch

    env.setenv("OPENAI_API_KEY", KEY)
    env.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    env.setenv("VSEARCHER_API_BASE_URL", "http://127.0.0.1:8/v1")
    none = str(tmp_path / "none.jsonl")
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "sources.jsonl").write_text("")  # no image: each step states its endpoint, then has nothing to do
    runs = {
        "extract m: http://127.0.0.1:9/v1 (from $OPENAI_BASE_URL); key from $OPENAI_API_KEY": lambda: (
            build_o3_bench.main(["extract", "--output_dir", str(ws), "--model", "m", "--skip_endpoint_check", "--no_progress"])
        ),
        "synthesize m: http://127.0.0.1:9/v1 (from $OPENAI_BASE_URL); key from $OPENAI_API_KEY": lambda: (
            build_o3_bench.main(["synthesize", "--output_dir", str(ws), "--model", "m", "--skip_endpoint_check", "--no_progress"])
        ),
        "vSearcher: http://127.0.0.1:8/v1 (from $VSEARCHER_API_BASE_URL); key from nowhere": lambda: (
            evaluate_vsearch.main(["--model", "v", "--ann_file", none, "--img_dir", str(tmp_path), "--output_dir", str(tmp_path / "v")])
        ),
        "describer gpt-5-nano: http://127.0.0.1:9/v1 (from $OPENAI_BASE_URL); key from $OPENAI_API_KEY": lambda: (
            build_region_localization.main(["--layouts", none, "--output_dir", str(tmp_path / "r")])
        ),
        "generator g: http://127.0.0.1:9/v1 (from $OPENAI_BASE_URL); key from $OPENAI_API_KEY": lambda: (
            build_reasoning_data.main(["generate", "--output_dir", str(tmp_path / "w"), "--ann_file", none, "--img_dir", str(tmp_path), "--model", "g"])
        ),
        "judge j: http://127.0.0.1:9/v1 (from $OPENAI_BASE_URL); key from $OPENAI_API_KEY (the $OPENAI_BASE_URL": lambda: (
            build_reasoning_data.main(["check", "--output_dir", str(tmp_path / "w"), "--judge_model", "j"])
        ),
        "scorer s: http://127.0.0.1:9/v1 (from $OPENAI_BASE_URL); key from $OPENAI_API_KEY": lambda: (
            build_reasoning_data.main(["score", "--output_dir", str(tmp_path / "w"), "--scorer_model", "s"])
        ),
    }  # fmt: skip
    for line, run in runs.items():
        caplog.clear()
        with caplog.at_level(logging.INFO):
            try:
                run()
            except SystemExit:
                pass
        text = "\n".join(r.getMessage() for r in caplog.records if "endpoints:" in r.getMessage())
        assert line in text, (line, text)
        assert KEY not in text
    env.setenv("JUDGE_API_BASE_URL", "http://judge.example/v1")
    assert build_reasoning_data.main(["check", "--output_dir", str(tmp_path / "w"), "--judge_model", "j"]) == 2
