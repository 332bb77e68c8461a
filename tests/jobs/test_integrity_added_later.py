"""Settings added after a run directory was created: an old card lacks them, and is compared
as if it held the value its run actually used (insight_o3.jobs.integrity.ADDED_LATER), so a resume with the
default goes on and a resume with another value is refused naming that value."""

from __future__ import annotations

import json

import pytest

from insight_o3.evaluation.agent_registry import BUILTIN
from insight_o3.evaluation.run_dir import STAMP_FILE, STAMPED_KEY
from insight_o3.jobs.integrity import ADDED_LATER, FIXED_KEY, Invocation, SettingsChanged, settle
from insight_o3.scripts import evaluate
from insight_o3.scripts._shared import flag_kinds
from tests.support import eval_bench as eb


def _inv(command="evaluate", prompts=None, **settings) -> Invocation:
    derived = {"prompts_sha256": prompts or {"A_PROMPT": "a"}}
    kinds = flag_kinds(evaluate.build_parser())  # evaluate's flags: the settings these tests vary
    return Invocation(command, {"model": "m", **settings}, derived=derived, kinds=kinds)


def _old(inv: Invocation, *drop: str) -> dict:
    """The card a run of ``inv`` wrote before the settings ``drop`` (dotted) existed."""
    card = settle(None, {}, inv, where="w")
    for key in drop:
        *parents, leaf = key.split(".")
        node = card[FIXED_KEY]
        for p in parents:
            node = node[p]
        del node[leaf]
    return card


@pytest.mark.parametrize("vsearcher, agent", [(None, "single_model"), ("vs", "insight_o3")])
def test_an_old_card_implies_the_agent_its_mode_was(vsearcher, agent):
    old = _old(_inv(vsearcher_model=vsearcher, agent=agent), "agent")
    assert "agent" not in old[FIXED_KEY]
    again = settle(old, {}, _inv(vsearcher_model=vsearcher, agent=agent), where="w")
    assert again[FIXED_KEY] == old[FIXED_KEY] and len(again["history"]) == 2  # the old card is kept as it was
    with pytest.raises(SettingsChanged) as e:
        settle(old, {}, _inv(vsearcher_model=vsearcher, agent="deepeyes"), where="w")
    assert e.value.differences == [f'agent: first run "{agent}", this run "deepeyes"']


def test_the_implied_agents_are_the_registry_names():
    old = {"command": "evaluate", "vsearcher_model": None}
    assert ADDED_LATER["agent"](old, "x") in BUILTIN
    assert ADDED_LATER["agent"]({**old, "vsearcher_model": "vs"}, "x") in BUILTIN


def test_another_commands_setting_of_that_name_is_not_implied():
    old = _old(_inv("build_o3_bench filter", agent="single_model"), "agent")
    with pytest.raises(SettingsChanged, match=r"agent: first run \(not set\)"):
        settle(old, {}, _inv("build_o3_bench filter", agent="single_model"), where="w")


def test_a_prompt_added_to_the_package_later_is_not_one_an_old_run_used():
    new = {"A_PROMPT": "a", "B_PROMPT": "b"}
    old = _old(_inv(prompts=new), "prompts_sha256.B_PROMPT")
    settle(old, {}, _inv(prompts=new), where="w")  # accepted
    with pytest.raises(SettingsChanged) as e:  # one it had, changed: refused
        settle(old, {}, _inv(prompts={"A_PROMPT": "a2", "B_PROMPT": "b"}), where="w")
    assert e.value.differences == ['prompts_sha256.A_PROMPT: first run "a", this run "a2"']
    with pytest.raises(SettingsChanged, match=r'A_PROMPT: first run "a", this run \(not set\)'):  # or gone
        settle(old, {}, _inv(prompts={"B_PROMPT": "b"}), where="w")


def test_a_run_dir_from_before_agent_resumes_with_the_default_and_refuses_another(tmp_path, openai_server, capsys):
    bench = eb.make_bench(tmp_path / "bench")
    srv, judge = openai_server(eb.model_script()), openai_server(eb.judge_script())
    argv = eb.evaluate_argv(*bench, tmp_path / "out", srv.base_url, judge.base_url)
    assert evaluate_main(argv) == 0
    card_path = tmp_path / "out" / "m" / "o3_bench" / "run_card.json"
    card = json.loads(card_path.read_text())
    # as the code before --agent (54b93a2) wrote it: no agent in the fixed settings nor in the card, no trial stamps
    del card[FIXED_KEY]["agent"], card["agent"], card["settings"]["agent"], card[STAMPED_KEY]
    card_path.write_text(json.dumps(card))
    (card_path.parent / "trial_0" / STAMP_FILE).unlink()
    records = (tmp_path / "out" / "m" / "o3_bench" / "trial_0" / "eval_records.jsonl").read_text()
    (tmp_path / "out" / "m" / "o3_bench" / "trial_0" / "done").unlink()  # a run to resume
    capsys.readouterr()
    assert evaluate_main(argv) == 0, capsys.readouterr().err
    assert (tmp_path / "out" / "m" / "o3_bench" / "trial_0" / "eval_records.jsonl").read_text() == records
    before = card_path.read_bytes()
    assert evaluate_main([*argv, "--agent", "deepeyes"]) == 2
    assert 'agent: first run "single_model", this run "deepeyes"' in capsys.readouterr().err
    assert card_path.read_bytes() == before


def evaluate_main(argv: list[str]) -> int:
    from insight_o3.scripts import evaluate

    return evaluate.main(argv)
