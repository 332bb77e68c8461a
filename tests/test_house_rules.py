"""House rules of the package that a reader relies on (docs/architecture.md), checked on the source."""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "insight_o3"
RECIPE = PACKAGE.parent / "verl" / "recipe"
FLAG = re.compile(r"--[a-z][a-z_]+")


def _below_commands() -> list[Path]:
    """The library's modules below the commands (``scripts/`` parses command lines)."""
    return [p for p in sorted(PACKAGE.rglob("*.py")) if p.relative_to(PACKAGE).parts[0] != "scripts"]


def _strings(node: ast.AST) -> list[str]:
    return [s.value for s in ast.walk(node) if isinstance(s, ast.Constant) and isinstance(s.value, str)]


def test_no_command_line_below_the_commands():
    """Nothing below the commands takes an ``argparse.Namespace``: each run has a typed config (none in
    ``grep -rn Namespace insight_o3``)."""
    users = [
        f"{p.relative_to(PACKAGE)}:{n}"
        for p in _below_commands()
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if "Namespace" in line
    ]
    assert users == []


def test_errors_below_the_commands_name_settings_not_flags():
    """An error raised in the library names the setting; the command that has the flag maps it."""
    named = []
    for p in _below_commands():
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.Raise) and node.exc is not None:
                flags = [f for s in _strings(node.exc) for f in FLAG.findall(s)]
                if flags:
                    named.append(f"{p.relative_to(PACKAGE)}:{node.lineno}: {flags}")
    assert named == []


def test_one_name_one_thing():
    """No class name is defined twice in the package (one name, one thing: a reader who meets ``Layout`` or
    ``Endpoint`` knows which one it is)."""
    where: dict[str, list[str]] = {}
    for p in sorted(PACKAGE.rglob("*.py")):
        for node in ast.parse(p.read_text()).body:
            if isinstance(node, ast.ClassDef):
                where.setdefault(node.name, []).append(f"{p.relative_to(PACKAGE)}:{node.lineno}")
    assert {name: places for name, places in where.items() if len(places) > 1} == {}


def test_one_chat_call():
    """Only :mod:`insight_o3.endpoints.chat` sends a chat request and reads its choices: every other module asks
    through ``chat_once``/``chat_choices`` (one policy for a reply without a first choice)."""
    callers = []
    for p in sorted(PACKAGE.rglob("*.py")):
        if p.relative_to(PACKAGE).as_posix() == "endpoints/chat.py":
            continue
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.Attribute) and node.attr == "completions":
                callers.append(f"{p.relative_to(PACKAGE)}:{node.lineno}")
    assert callers == []


def _dataclass_fields() -> list[tuple[str, str, ast.AnnAssign]]:
    """(where, class name, field) of every dataclass field of the package and the recipe."""
    out = []
    for p in sorted([*PACKAGE.rglob("*.py"), *RECIPE.rglob("*.py")]):
        for node in ast.walk(ast.parse(p.read_text())):
            if not isinstance(node, ast.ClassDef) or not any(
                "dataclass" in ast.unparse(d) for d in node.decorator_list
            ):
                continue
            for stmt in node.body:
                if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                    out.append((f"{p.relative_to(PACKAGE.parent)}:{stmt.lineno}", node.name, stmt))
    return out


def test_no_key_in_a_repr():
    """A field that holds an API key is left out of its record's ``repr`` (so of every log line, error and test
    failure that prints the record). ``FilterSettings``, ``ReliabilitySettings``, ``CheckerEndpoint``,
    ``VSearchEvalSettings`` and ``DescriberEndpoint`` printed theirs."""
    shown = [
        f"{where} {cls}.{f.target.id}"  # type: ignore[union-attr]
        for where, cls, f in _dataclass_fields()
        if f.target.id.endswith("api_key")  # type: ignore[union-attr]
        and not (f.value is not None and "repr=False" in ast.unparse(f.value))
    ]
    assert shown == []


def test_one_endpoint_type_and_one_run_controls_type():
    """An endpoint's address and key are fields of one record (``endpoints.endpoint.Endpoint``), and the run
    controls of one (``jobs.controls.RunControls``); every other record holds those whole."""
    address = {"base_url", "api_base_url", "api_key", "judge_api_key", "judge_api_base_url", "judge_base_url"}
    controls = {"concurrency", "progress", "max_failure_ratio", "max_tokens_total", "check_endpoints", "max_cost"}
    found: dict[str, set[str]] = {}
    for _, cls, f in _dataclass_fields():
        name = f.target.id  # type: ignore[union-attr]
        if name in address:
            found.setdefault("endpoint", set()).add(cls)
        if name in controls:
            found.setdefault("controls", set()).add(cls)
    assert found == {"endpoint": {"Endpoint"}, "controls": {"RunControls"}}


#: The longest a function of the library may be (a longer one is split into named steps a reader can follow).
MAX_FUNCTION_LINES = 80


def test_no_function_of_the_library_is_longer_than_80_lines():
    long = []
    for p in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                n = (node.end_lineno or node.lineno) - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    long.append(f"{p.relative_to(PACKAGE)}:{node.lineno} {node.name} ({n} lines)")
    assert long == []


def test_no_test_imports_another_test_module():
    """A helper two test modules share lives in ``tests/support`` (a fixture in a ``conftest.py``): no test module
    imports another one or a conftest, so a reader finds every helper where its name says."""
    tests = PACKAGE.parent / "tests"
    borrowed = []
    for p in sorted(tests.rglob("*.py")):
        if p.relative_to(tests).parts[0] == "support":
            continue
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.ImportFrom):
                modules = ["." * node.level + (node.module or "")]
            elif isinstance(node, ast.Import):
                modules = [a.name for a in node.names]
            else:
                continue
            for m in modules:
                if m.startswith(".") or any(part == "conftest" or part.startswith("test_") for part in m.split(".")):
                    borrowed.append(f"{p.relative_to(tests)}:{node.lineno} {m}")
    assert borrowed == []


def _sentences(paragraph: str) -> int:
    """Sentence ends in a docstring paragraph (a full stop, ! or ? before a capital or the end)."""
    return len(re.findall(r"[.!?](?:\s+[A-Z]|$)", " ".join(paragraph.split())))


def test_every_package_says_its_one_sentence_and_its_public_names():
    """Each package's ``__init__`` opens with one sentence (what the package is) and lists its public names in
    ``__all__``: names it defines, re-exports or loads when asked for (PEP 562), else its modules — then every
    public module of it."""
    bad = []
    for init in sorted(PACKAGE.rglob("__init__.py")):
        tree = ast.parse(init.read_text())
        doc = ast.get_docstring(tree) or ""
        if _sentences(doc.split("\n\n")[0]) != 1:
            bad.append(f"{init}: the first paragraph of the docstring is not one sentence")
        listed = [
            ast.literal_eval(n.value)
            for n in tree.body
            if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in n.targets)
        ]
        if not listed:
            bad.append(f"{init}: no __all__")
            continue
        names = listed[0]
        here = init.parent
        modules = {p.stem for p in here.glob("*.py") if not p.stem.startswith("_")}
        modules |= {p.name for p in here.iterdir() if (p / "__init__.py").exists()}
        defined = {a.asname or a.name for n in tree.body if isinstance(n, ast.ImportFrom) for a in n.names}
        defined |= {n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef)}
        if "__getattr__" in defined:  # PEP 562: the names of a literal _LAZY {name: module} load their module
            lazy = [
                ast.literal_eval(n.value)
                for n in tree.body
                if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "_LAZY" for t in n.targets)
            ]
            for table in lazy:
                if not_modules := sorted(set(table.values()) - modules):
                    bad.append(f"{init}: _LAZY names {not_modules}, not modules of the package")
                defined |= set(table)
        unknown = [n for n in names if n not in modules | defined]
        if unknown:
            bad.append(f"{init}: __all__ names {unknown}, neither defined there nor a module")
        if set(names) <= modules and set(names) != modules:
            bad.append(f"{init}: __all__ lists modules but not {sorted(modules - set(names))}")
        if len(set(names)) != len(names):
            bad.append(f"{init}: __all__ repeats a name")
    assert not bad, "\n".join(bad)


def test_the_judge_flow_and_the_reasoner_mode_are_vocabulary_members():
    """``flow`` and ``mode`` are compared to members of :mod:`insight_o3.protocol.statuses` (``JudgeFlow``,
    ``ReasonerMode``), never to bare strings, and a flow or mode given as text becomes its member."""
    from insight_o3.evaluation.judge import JUDGE_COMPLETION_KWARGS, AnswerJudge, default_flow
    from insight_o3.protocol.statuses import JudgeFlow, ReasonerMode

    bare = []
    for p in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(p.read_text())):
            if not isinstance(node, ast.Compare):
                continue
            sides = [node.left, *node.comparators]
            named = any(isinstance(s, ast.Attribute) and s.attr in ("flow", "mode", "judge_flow") for s in sides)
            text = [s.value for s in sides if isinstance(s, ast.Constant) and isinstance(s.value, str)]
            if named and set(text) & {*JudgeFlow, *ReasonerMode}:
                bare.append(f"{p.relative_to(PACKAGE)}:{node.lineno}")
    assert bare == []
    judge = AnswerJudge(None, "j", flow="verify")  # type: ignore[arg-type]
    assert judge.flow is JudgeFlow.VERIFY and judge.completion_kwargs == JUDGE_COMPLETION_KWARGS["verify"]
    assert default_flow("vs") is JudgeFlow.VERIFY and default_flow(None) is JudgeFlow.EXTRACT
    assert set(JUDGE_COMPLETION_KWARGS) == set(JudgeFlow) and f"{ReasonerMode.TRAIN}" == "train"


#: Other vocabularies that share a word with the judge's: a reply's usage state (``"invalid"``), the key group of a
#: role (``env == "judge"``), the judge method (``"rule"``/``"judge"``), an attribution bucket (``"correct"``).
_OTHER_VOCABULARIES = {"usage", "state", "env", "method", "bucket"}


def _names(node: ast.AST) -> set[str]:
    return {
        n.id if isinstance(n, ast.Name) else n.attr for n in ast.walk(node) if isinstance(n, (ast.Name, ast.Attribute))
    }


def _bare_comparisons(words: set[str]) -> list[str]:
    """Comparisons in the library and the recipe of a value to one of ``words`` written as a bare string (a
    constant, or one in a literal tuple, list or set); a key looked up in a mapping (``"judge" in row``) is not one."""
    found = []
    for p in [*sorted(PACKAGE.rglob("*.py")), *sorted(RECIPE.rglob("*.py"))]:
        for node in ast.walk(ast.parse(p.read_text())):
            if not isinstance(node, ast.Compare):
                continue
            sides = [node.left, *node.comparators]
            lookup = isinstance(node.left, ast.Constant) and isinstance(node.ops[0], (ast.In, ast.NotIn))
            if lookup and not isinstance(node.comparators[0], (ast.Tuple, ast.List, ast.Set)):
                continue
            texts = {
                e.value
                for s in sides
                for e in (s.elts if isinstance(s, (ast.Tuple, ast.List, ast.Set)) else [s])
                if isinstance(e, ast.Constant) and isinstance(e.value, str)
            }
            others = set().union(*(_names(s) for s in sides))
            if texts & words and not others & _OTHER_VOCABULARIES:
                found.append(f"{p.relative_to(PACKAGE.parent)}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_the_judges_statuses_and_the_unit_kinds_are_vocabulary_members():
    """A verdict's status, a lost record's fail stage and an evaluation unit's kind are compared to members of
    :mod:`insight_o3.protocol.statuses` (``VerdictStatus``, ``FailStage``, ``UnitKind``), never to bare strings;
    records still hold the plain text (the golden record tests pin the bytes)."""
    from insight_o3.evaluation.judge import Verdict
    from insight_o3.evaluation.schema import FAIL_STAGES, STATUSES, EvalResult
    from insight_o3.protocol.statuses import FailStage, UnitKind, VerdictStatus

    assert _bare_comparisons({*VerdictStatus, *FailStage, *UnitKind}) == []
    er = EvalResult.model_validate({"status": "failed", "fail_stage": "judge"})
    assert er.status is VerdictStatus.FAILED and er.fail_stage is FailStage.JUDGE
    on_disk = er.to_dict()
    assert type(on_disk["status"]) is str and type(on_disk["fail_stage"]) is str
    assert (on_disk["status"], on_disk["fail_stage"]) == ("failed", "judge")
    assert STATUSES == ("correct", "wrong", "incomplete", "invalid", "failed") and FAIL_STAGES == ("solver", "judge")
    assert Verdict(VerdictStatus.CORRECT).is_correct and not Verdict(VerdictStatus.WRONG).is_correct


#: A citation of the tracker's history in a comment or a docstring (an issue number, "the issue's case", a finding).
HISTORY = re.compile(r"\bissues?\s+#?\d+|\bthe issue\b|\bfindings?\s+\d+", re.IGNORECASE)


def test_comments_say_what_and_why_not_which_issue():
    """The library, the recipe, the tests and docs/architecture.md cite no issue, review finding or round of work:
    a comment or docstring says what the code or the test proves, then why; history is in git."""
    tests = PACKAGE.parent / "tests"
    files = [
        *PACKAGE.rglob("*.py"),
        *RECIPE.rglob("*.py"),
        *tests.rglob("*.py"),
        PACKAGE.parent / "docs" / "architecture.md",
    ]
    cited = [
        f"{p.relative_to(PACKAGE.parent)}:{n}: {line.strip()[:80]}"
        for p in sorted(files)
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if HISTORY.search(line) and p != Path(__file__)
    ]
    assert cited == []
    assert HISTORY.search("Hostile replies, round 2 (issue 34)") and HISTORY.search("Issue 21 finding 7: a pool")
    assert not HISTORY.search("EngineCore encountered an issue. See stack trace")
