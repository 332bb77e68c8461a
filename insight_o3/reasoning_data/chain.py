"""Progressive reasoning generation as a sans-IO session: the loop of the release's ``generate_response``
(``data_generation/data_generation.py`` at 5e9c6f9, rows IVD1-IVD7), a reply at a time, no client.

The conversation starts ``[system: STEP_SYSTEM_PROMPT, user: [image, question], assistant: PREFILL]``. Each reply is
a step: ``json.loads`` of the whole reply, then its ``title``, ``content`` and ``next_action`` (any failure — not
JSON, not an object, a key missing — appends :data:`~.prompts.REPAIR_PROMPT` as a user message, the failed reply not
kept, and asks again; the third failure in a row makes the release's ``Error`` step, whose ``next_action`` is
``final_answer``). A step is appended as the assistant message ``json.dumps(step)`` (the parsed object, extra keys
included); then :data:`~.prompts.FINAL_PROMPT` when its ``next_action`` is ``final_answer`` or the step count passed
:data:`~.prompts.STEP_CAP` (so at most 16 steps), else :data:`~.prompts.CONTINUE_PROMPT`. The reply to the final
prompt is the final answer, kept as it is.

What the release keeps without a look is checked afterwards (:meth:`ChainSession.problem`, ours, row IVD8): a chain
with the ``Error`` step, one stopped by the cap, a step without content, or a final answer that is not JSON with a
``content`` is *malformed*; the engine generates it once more (its bounded retry) and records both.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field
from typing import Any

from ..base.json_types import JSONObject
from ..protocol.trajectory import message
from .prompts import CONTINUE_PROMPT, FINAL_PROMPT, PREFILL, REPAIR_PROMPT, STEP_ATTEMPTS, STEP_CAP, STEP_SYSTEM_PROMPT

STEP_KEYS = ("title", "content", "next_action")


class Phase(enum.StrEnum):
    STEP = "step"  # the next reply is a step
    FINAL = "final"  # the next reply is the final answer
    DONE = "done"


def parse_step(reply: str) -> JSONObject:
    """A step reply as the release reads it: ``json.loads`` of the whole text, then the three keys looked up. Raises
    what the release's lookups raise (``json.JSONDecodeError``, ``KeyError``, ``TypeError``), whose text the ``Error``
    step quotes. The parsed object is returned whole (its extra keys go back to the model in ``json.dumps``). Linear
    in the reply, whose length the request's token limit bounds."""
    data = json.loads(reply)
    for key in STEP_KEYS:
        data[key]  # noqa: B018 - the release's lookups, for their exceptions
    if not isinstance(data, dict):  # a str/list indexed by a str raised above; anything else is no step
        raise TypeError(f"a JSON {type(data).__name__} is not a step")
    return data


def final_content(final: str | None) -> Any:
    """The content of a final answer (``json.loads(final)["content"]``, as the release's check reads it), or None
    when it has none."""
    if final is None:
        return None
    try:
        data = json.loads(final)
        return data["content"]
    except (ValueError, KeyError, TypeError, RecursionError):
        return None


def chain_text(steps: list[JSONObject]) -> str:
    """The chain as a reasoning agent writes it: one ``"{title}: {content}"`` line per step (the form of the release's
    summary-agent example, ``infer_summary_model.py`` l. 152; ours to use for the training text, row IVD12)."""
    return "\n".join(f"{s['title']}: {s['content']}" for s in steps)


@dataclass
class ChainSession:
    """One progressive generation (see the module docstring). ``image``: the question image's part."""

    prompt: str
    image: JSONObject
    messages: list[JSONObject] = field(init=False)
    steps: list[JSONObject] = field(default_factory=list)
    #: why each failed step reply failed (``str`` of the release's exception), in order
    repairs: list[str] = field(default_factory=list)
    final: str | None = None
    final_finish: str | None = None
    phase: Phase = Phase.STEP
    error_step: bool = False
    requests: int = 0
    _count: int = 1
    _failures: int = 0

    def __post_init__(self) -> None:
        self.messages = [
            message("system", STEP_SYSTEM_PROMPT),
            message("user", self.image, self.prompt),
            message("assistant", PREFILL),
        ]

    @property
    def done(self) -> bool:
        return self.phase is Phase.DONE

    def reply(self, text: str, finish_reason: str | None = None) -> None:
        """Take the reply to the current messages."""
        self.requests += 1
        if self.phase is Phase.FINAL:
            self.final, self.final_finish, self.phase = text, finish_reason, Phase.DONE
            return
        if self.phase is Phase.DONE:
            raise RuntimeError("the chain is complete")
        try:
            data = parse_step(text)
        except (ValueError, KeyError, TypeError, RecursionError) as e:  # the release catches every Exception
            self.repairs.append(str(e))
            self.messages.append(message("user", REPAIR_PROMPT))
            self._failures += 1
            if self._failures == STEP_ATTEMPTS:
                self.error_step = True
                content = f"Failed to generate step after 3 attempts. Error: {e!s}"
                self._next({"title": "Error", "content": content, "next_action": "final_answer"})
            return
        self.steps.append({"count": self._count, **{k: data[k] for k in STEP_KEYS}})
        self._next(data)

    def _next(self, step: JSONObject) -> None:
        self._failures = 0
        self.messages.append(message("assistant", json.dumps(step)))
        if step["next_action"] == "final_answer" or self._count > STEP_CAP:
            self.messages.append(message("user", FINAL_PROMPT))
            self.phase = Phase.FINAL
        else:
            self.messages.append(message("user", CONTINUE_PROMPT))
            self._count += 1

    @property
    def capped(self) -> bool:
        """The cap stopped the chain (its last step did not say ``final_answer``)."""
        return not self.error_step and bool(self.steps) and self.steps[-1]["next_action"] != "final_answer"

    def problem(self) -> str | None:
        """Why the finished chain is malformed (ours, row IVD8), or None."""
        if self.error_step:
            return f"a step failed {STEP_ATTEMPTS} times: {self.repairs[-1]}"
        if self.capped:
            return f"no final_answer after {len(self.steps)} steps (the cap)"
        for s in self.steps:
            c = s["content"]
            if c is None or (isinstance(c, str) and not c.strip()):
                return f"step {s['count']} has no content"
        if self.final_finish == "length":
            return "the final answer was cut off at the token limit"
        if final_content(self.final) is None:
            return "the final answer is not JSON with a 'content'"
        return None

    def result(self) -> JSONObject:
        """What a record keeps of the chain."""
        return {
            "steps": self.steps,
            "final": self.final,
            "final_answer": final_content(self.final),
            "repairs": self.repairs,
            "requests": self.requests,
        }
