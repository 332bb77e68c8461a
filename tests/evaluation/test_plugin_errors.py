"""An installed agent plugin that cannot be used is named in one line with exit status 2, never a traceback: its
entry point raises at import, names a missing attribute, has a syntax error, is not an ``AgentPlugin``, its factory
or its ``build`` raises, or two distributions register its name. Each plugin is a real distribution (a
``.dist-info`` with ``entry_points.txt``) on ``sys.path``, found by ``importlib.metadata`` as pip's would be."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from insight_o3.evaluation.agent_registry import PluginError, agent_names, get_agent
from insight_o3.scripts import evaluate
from tests.support import eval_bench as eb

GOOD = """
from insight_o3.evaluation.agent_registry import AgentPlugin
from insight_o3.protocol.attempt import Attempt, Solver


class FirstLetter(Solver):
    async def solve(self, sample, n):
        return [Attempt("A", "stop") for _ in range(n)]

    async def aclose(self):
        pass


def _build(ctx):
    {build}


PLUGIN = AgentPlugin(name="{name}", protocol_version="t@1", description="answers A", build=_build, calls_model=False)
"""


def install(root: Path, dist: str, module: str, source: str, name: str, value: str) -> None:
    """A distribution ``dist`` holding ``module`` (``source``) whose entry point ``name`` is ``value``."""
    root.mkdir(parents=True, exist_ok=True)
    (root / f"{module}.py").write_text(textwrap.dedent(source))
    info = root / f"{dist.replace('-', '_')}-0.1.dist-info"  # as a wheel names it: the name's dashes are _
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[insight_o3.agents]\n{name} = {value}\n")


CASES = {
    "raises_at_import": ("raise RuntimeError('boom at import')\n", "{m}:PLUGIN", "RuntimeError: boom at import"),
    "missing_attribute": (GOOD.format(name="missing_attribute", build="return FirstLetter()"), "{m}:NOPE", "NOPE"),
    "syntax_error": ("def broken(:\n", "{m}:PLUGIN", "SyntaxError"),
    "factory_raises": ("def PLUGIN():\n    raise ValueError('no factory today')\n", "{m}:PLUGIN", "no factory today"),
    "not_a_plugin": ("PLUGIN = 42\n", "{m}:PLUGIN", "is not an AgentPlugin (got int)"),
    "misnamed": (GOOD.format(name="other", build="return FirstLetter()"), "{m}:PLUGIN", "agent called 'other'"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_plugin_that_cannot_load_is_a_usage_error(case, tmp_path, monkeypatch, capsys):
    source, value, cause = CASES[case]
    module = f"plugin_{case}_{abs(hash(str(tmp_path))) % 10**8}"
    install(tmp_path / "site", f"dist-{case}", module, source, case, value.format(m=module))
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    assert case in agent_names()  # listed without loading it
    with pytest.raises(PluginError, match=f"entry point '{case}'.*dist-{case} 0.1.*") as e:
        get_agent(case)
    assert cause in str(e.value)
    ann, img = eb.make_bench(tmp_path / "bench")
    with pytest.raises(SystemExit) as exit_:
        evaluate.main(eb.evaluate_argv(ann, img, tmp_path / "out", "http://127.0.0.1:9/v1", None, "--agent", case))
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert f"--agent: entry point '{case}'" in err and cause in err and "Traceback" not in err


def test_two_distributions_registering_one_name_are_refused(tmp_path, monkeypatch):
    for i in (1, 2):
        module = f"twin_{i}_{abs(hash(str(tmp_path))) % 10**8}"
        install(tmp_path / f"site{i}", f"twin-{i}", module, GOOD.format(name="twin", build="return FirstLetter()"),
                "twin", f"{module}:PLUGIN")  # fmt: skip
        monkeypatch.syspath_prepend(str(tmp_path / f"site{i}"))
    with pytest.raises(PluginError, match="'twin' is registered more than once: .*twin-1 0.1.*twin-2 0.1"):
        get_agent("twin")


def test_a_plugin_whose_build_raises_is_a_clear_error(tmp_path, monkeypatch, openai_server, capsys):
    module = f"builds_badly_{abs(hash(str(tmp_path))) % 10**8}"
    source = GOOD.format(name="builds_badly", build="raise KeyError('the plugin needs FOO')")
    install(tmp_path / "site", "builds-badly", module, source, "builds_badly", f"{module}:PLUGIN")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    ann, img = eb.make_bench(tmp_path / "bench")
    judge = openai_server(eb.judge_script())
    argv = eb.evaluate_argv(ann, img, tmp_path / "out", "http://127.0.0.1:9/v1", judge.base_url)
    rc = evaluate.main([*argv, "--agent", "builds_badly", "--api_key", "EMPTY", "--judge_api_key", "EMPTY"])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "agent plugin 'builds_badly': build failed: KeyError: 'the plugin needs FOO'" in err
    assert "Traceback" not in err
