"""The question text a model is given: the one formatter of question + options.

Two readings, both defined here and nowhere else:

* :func:`question_text` (``unescape_newlines=False``): the question, then a newline and the options block
  as the annotation wrote it. The released single-model harness sends this (``Sample.prompt``).
* :func:`vreasoner_question` (:func:`insight_o3_question` for a sample): what the authors' verl fork gives
  the **vReasoner**, in training and in validation: the same text with every literal ``\\n`` (backslash, n)
  of a multiple-choice text turned into a newline. The fork's ``get_question``
  (``recipe/vsearch/create_parquet_dataset.py`` at 926d137, lines 97-100 / 126-129 / 165-168:
  ``f"{question}\\n{options}".replace("\\\\n", "\\n")``) does this for the multiple-choice benchmarks;
  open questions (VisualProbe, the collages) are returned unchanged (lines 194-195, 231-232).

Every user of the vReasoner question goes through :func:`insight_o3_question`: the evaluation solver
(``agents.solver``), the judge's verify flow (``evaluation.judge``), the recipe's agent loop, its dataset
(``recipe/vsearch/dataset.py``) and its parquet writer (``create_parquet_dataset.py``), so the first
vReasoner request of evaluation and of training are the same bytes (``tests/test_questions.py``).
"""

from __future__ import annotations

from typing import Protocol


class HasQuestion(Protocol):
    """Anything with the annotation's ``question`` and (formatted) ``options`` text."""

    question: str
    options: str | None


def question_text(question: str, options: str | None, unescape_newlines: bool = False) -> str:
    """The user text of a question: the question, then a newline and the options block when there is
    one. ``unescape_newlines`` turns literal ``\\n`` sequences of a multiple-choice text into newlines
    (the fork's ``get_question``; use :func:`vreasoner_question`)."""
    if not options:
        return question
    text = f"{question}\n{options}"
    return text.replace("\\n", "\n") if unescape_newlines else text


def vreasoner_question(question: str, options: str | None) -> str:
    """The vReasoner's question (the fork's ``get_question``): question + ``\\n`` + options, literal ``\\n``
    of a multiple-choice text turned into newlines; an open question unchanged."""
    return question_text(question, options, unescape_newlines=True)


def insight_o3_question(sample: HasQuestion) -> str:
    """:func:`vreasoner_question` of a sample (evaluation ``Sample``, the recipe's rows)."""
    return vreasoner_question(sample.question, sample.options)


__all__ = ["HasQuestion", "question_text", "vreasoner_question", "insight_o3_question"]
