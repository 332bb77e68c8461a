"""The README's and data/README.md's examples run as written: every ``bash``/``python`` block is either
run here, in order, against the keyless demo's scripted endpoints in a repository-like sandbox
(:mod:`tests.support.readme_examples`), or marked as not run with its reason (a GPU, the Hub, the full install,
real models) — a new example that is neither fails, so examples cannot rot unseen."""

from __future__ import annotations

import pytest

from tests.support.readme_examples import MODEL, Sandbox, all_examples, commands, unknown_flags

pytestmark = pytest.mark.smoke

#: the runs the README's analysis examples compare besides the one its evaluate example makes: InSight-o3's
INSIGHT_O3_RUN = (
    "python -m insight_o3.scripts.evaluate --benchmark o3_bench --model gpt-5-mini --eval_name insight-o3/o3_bench "
    '--vsearcher_model scripted-vsearcher --vsearcher_api_base_url "$VSEARCHER_API_BASE_URL" --num_trials 1 '
    "--no_progress"
)


def test_every_example_is_run_or_marked_with_a_reason():
    found, problems = all_examples()
    assert len(found) >= 10, "the examples were not found: has the README's code fence style changed?"
    unmarked = [ex.where for ex in found if not ex.marked]
    assert not unmarked, (
        f"examples neither run nor marked: {unmarked}; put <!-- example: run --> (run by "
        "tests/test_readme_examples.py against the scripted endpoints) or <!-- example: not run (REASON) --> "
        "on the line before each fence"
    )
    assert not problems, "\n".join(problems)
    assert sum(ex.run for ex in found) >= 5


def test_marker_parsing_catches_an_unmarked_and_a_dangling_marker(tmp_path):
    from tests.support.readme_examples import examples

    md = tmp_path / "x.md"
    md.write_text(
        "<!-- example: run -->\n```bash\necho a\n```\n\n```bash\necho b\n```\n"
        "<!-- example: not run (GPU) -->\n\n```python\nprint(1)\n```\n<!-- example: not run () -->\n```sh\nls\n```\n"
        "```json\n{}\n```\n"
    )
    found, problems = examples(md, "x.md")
    assert [(e.line, e.lang, e.run, e.marked, e.why) for e in found] == [
        (2, "bash", True, True, None),
        (6, "bash", False, False, None),
        (11, "python", False, False, None),  # a blank line between marker and fence: not its marker
        (15, "bash", False, False, None),  # an empty reason is no marker
    ]
    assert [p.split(":")[1] for p in problems] == ["9", "14"]


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory):
    box = Sandbox(tmp_path_factory.mktemp("readme-sandbox"))
    try:
        yield box
    finally:
        box.close()


def test_the_examples_run_as_written_against_the_scripted_endpoints(sandbox):
    found, _ = all_examples()
    to_run = [ex for ex in found if ex.run]
    sandbox.given(INSIGHT_O3_RUN)
    before = {role: sandbox.requests(role) for role in ("model", "judge")}
    for ex in to_run:
        r = sandbox.run(ex)
        assert r.returncode == 0, (
            f"the example at {ex.where} fails (status {r.returncode}):\n{ex.code}\n{r.stdout[-4000:]}"
        )
    # they ran against the scripted endpoints, and wrote what the README says
    assert all(sandbox.requests(role) > before[role] for role in before)
    eval_dir = sandbox.root / "outputs" / "eval" / MODEL / "o3_bench"
    assert (eval_dir / "summary_metrics.json").is_file() and (eval_dir / "trial_2" / "eval_records.jsonl").is_file()
    assert (sandbox.root / "outputs" / "notebooks" / "visualize_output.html").is_file()  # the notebook, headless


def test_every_example_command_uses_flags_its_command_has():
    """Also the examples not run here (GPU, Hub, real models): each ``--flag`` of an ``insight_o3.scripts`` command is
    one of its parser's, each of a ``scripts/*.sh`` command is named in the script."""
    found, _ = all_examples()
    wrong = {
        f"{ex.where}: {' '.join(cmd[:4])} …": bad
        for ex in found
        if ex.lang == "bash"
        for cmd in commands(ex.code)
        if (bad := unknown_flags(cmd))
    }
    assert not wrong, f"example flags the command does not have: {wrong}"
    checked = [cmd for ex in found if ex.lang == "bash" for cmd in commands(ex.code) if cmd[:2] == ["python", "-m"]]
    assert len(checked) >= 20


def test_a_flag_the_command_lacks_is_caught():
    assert unknown_flags(["python", "-m", "insight_o3.scripts.evaluate", "--model", "m", "--num_trails", "3"]) == [
        "--num_trails"
    ]
    assert unknown_flags(["python", "-m", "insight_o3.scripts.build_o3_bench", "filter", "--solver", "m"]) == []
    assert unknown_flags(["python", "-m", "insight_o3.scripts.build_o3_bench", "extract", "--solver", "m"]) == [
        "--solver"
    ]
    assert unknown_flags(["python", "-m", "insight_o3.scripts.generate_collages", "pool", "--format", "viscot"]) == []
    assert unknown_flags(["bash", "scripts/vllm_serve_bg.sh", "start", "--no_such_flag", "--", "--dtype", "x"]) == [
        "--no_such_flag"
    ]
