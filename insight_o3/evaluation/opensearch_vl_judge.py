"""OpenSearch-VL's judge (``opensearch_vl/eval_with_gpt4o.py`` at c5c02a4), the ``opensearch_vl`` judge flow: the
answer is extracted from the episode's text (the first ``\\boxed{}``, else ``<answer>``, else ``<response>``, else
what follows the last ``</think>`` without tool calls, else the last 2000 characters), cut to 8000 characters, and
the judge is asked :data:`JUDGE_PROMPT` (temperature 0); ``correct: yes`` (the first ``correct:`` the reply holds)
is correct, anything else wrong. The extraction is linear in the text (the release's regexes, rewritten as scans
and checked against them on generated text)."""

from __future__ import annotations

import re

JUDGE_PROMPT = (
    "You are an impartial judge evaluating whether a deep research report contains the correct answer.\n\n"
    "[Question]\n{question}\n\n"
    "[Correct Answer]\n{correct_answer}\n\n"
    "[Deep Research Report]\n{response}\n\n"
    "Task: Determine if the deep research report contains the correct answer anywhere in its content.\n\n"
    "Instructions:\n"
    "1. Read through the entire research report carefully\n"
    "2. Look for the correct answer anywhere in the report (it may be embedded in paragraphs, tables, or sections)\n"
    "3. Check if the information in the report is consistent with the correct answer\n"
    '4. The answer does NOT need to be in a specific format or labeled as "final answer"\n'
    "5. Provide your reasoning\n"
    '6. Answer with "yes" if the report contains the correct answer, "no" if it doesn\'t or contradicts it\n\n'
    "Output format:\n"
    "correct: [yes/no]\n"
    "reasoning: [your explanation]"
)
#: ``call_gpt4o``'s ``params``: ``{"stream": False, "temperature": 0.0}``
COMPLETION_KWARGS: dict[str, float] = {"temperature": 0.0}
MAX_RESPONSE_CHARS = 8000
_TEXT = re.compile(r"\\text\{([^}]*)\}")  # a negated class: linear
_VERDICT = re.compile(r"correct:\s*(yes|no)", re.IGNORECASE)


def extract_boxed_content(text: str) -> str | None:
    """``extract_boxed_content``: the first ``\\boxed{...}`` with nested braces (unclosed: to the last but one
    character, as the release's slice), ``\\text{x}`` -> ``x``, ``\\#`` -> ``#``, ``\\%`` -> ``%``."""
    idx = text.find("\\boxed{")
    if idx == -1:
        return None
    start = idx + len("\\boxed{")
    depth, i = 1, start
    while i < len(text) and depth > 0:
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
        i += 1
    content = text[start : i - 1].strip()
    content = _TEXT.sub(r"\1", content)
    return content.replace("\\#", "#").replace("\\%", "%")


def _between(text: str, open_tag: str, close_tag: str) -> str | None:
    """``re.search(open + "(.*?)" + close, text, re.DOTALL).group(1)``."""
    i = text.find(open_tag)
    if i == -1:
        return None
    j = text.find(close_tag, i + len(open_tag))
    return None if j == -1 else text[i + len(open_tag) : j]


def _drop_tool_calls(text: str) -> str:
    """``re.sub(r"<tool_call>.*?</tool_call>", "", text, flags=re.DOTALL)``."""
    out, pos = [], 0
    while True:
        i = text.find("<tool_call>", pos)
        j = text.find("</tool_call>", i + len("<tool_call>")) if i != -1 else -1
        if i == -1 or j == -1:
            out.append(text[pos:])
            return "".join(out)
        out.append(text[pos:i])
        pos = j + len("</tool_call>")


def extract_final_answer(text: str) -> str:
    """``extract_final_answer``."""
    if not text:
        return ""
    boxed = extract_boxed_content(text)
    if boxed:
        return boxed
    answer = _between(text, "<answer>", "</answer>")
    if answer is not None:
        return answer.strip()
    response = _between(text, "<response>", "</response>")
    if response is not None:
        return response.strip()
    parts = text.split("</think>")
    if len(parts) > 1:
        last_part = _drop_tool_calls(parts[-1].strip()).strip()
        if last_part:
            return last_part[:2000]
    return text[-2000:] if len(text) > 2000 else text


def judge_prompt(question: str, correct_answer: str, response: str) -> str:
    return JUDGE_PROMPT.format(question=question, correct_answer=correct_answer, response=response[:MAX_RESPONSE_CHARS])


def parse_verdict(raw: str) -> bool:
    """``parse_judge_response``'s ``acc``: the first ``correct: yes|no`` (any case); none is not correct."""
    m = _VERDICT.search(raw)
    return m is not None and m.group(1).lower() == "yes"
