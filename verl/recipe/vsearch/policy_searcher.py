"""The vSearcher protocol driven by the *policy* through verl's rollout server, token by token.

Every protocol decision (prompts, parsing, box validation, cropping, tool-call limit) is made by
:class:`insight_o3.agents.SearcherSession`, the same state machine the inference vSearcher uses.
This module only replaces the "generate" step: it renders the session's messages with the
model's chat template (through verl's ``AgentLoopBase.apply_chat_template``, so image pads are
expanded by the processor exactly as verl's own loops do), asks ``server_manager.generate`` for
token ids, decodes them for the session, and keeps the token-level record verl trains on:

* ``prompt_ids``: system prompt + first user turn (image + "Locate ...") + ``<|im_start|>assistant``;
Image decoding / cropping and the processor (chat template + image processor) run in worker threads
(``asyncio.to_thread``), never on the agent-loop event loop that all episodes of a worker share; verl's
own ``AgentLoopBase.apply_chat_template`` runs the image processor on the event loop itself.

* ``response_ids``: every assistant turn (``response_mask`` 1) interleaved with every tool response
  (``response_mask`` 0): the ``\\n`` that closes the assistant turn in the chat template, then the
  user turn ``<tool_response>`` + crop + ``</tool_response>`` + reminder, then the next
  ``<|im_start|>assistant\\n`` header. Only tokens the policy sampled carry mask 1.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any
from uuid import uuid4

from PIL import Image

from insight_o3.agents import LocateResult, SearcherSession
from insight_o3.base.json_types import JSONObject
from insight_o3.imaging.images import ImageRef, ImageStore
from insight_o3.protocol.fatal import fatal_step, mask_start
from insight_o3.protocol.limits import LIMITS
from insight_o3.protocol.statuses import SearcherAction

from .image_inputs import ImageViews
from .rollout_fields import SampleFields


@dataclass
class SearcherRollout:
    """One finished policy vSearcher episode at token level, plus the protocol's verdict."""

    prompt_ids: list[int]
    response_ids: list[int]
    response_mask: list[int]
    response_logprobs: list[float] | None
    images: list[Image.Image]
    result: LocateResult
    assistant_texts: list[str]
    frame_size: tuple[int, int]
    format_ok: bool
    format_error: str | None
    truncated: bool = False
    generate_s: float = 0.0
    tool_s: float = 0.0
    num_turns: int = 0
    errors: list[str] = field(default_factory=list)
    crop_boxes: list[list[float]] = field(default_factory=list)  # the model's bbox_2d per executed crop
    image_size: tuple[int, int] | None = None  # original image (W, H)
    #: ``images`` as references (the training rows carry these instead of pixel values, ``image_inputs``)
    image_views: ImageViews | None = None
    #: the response position of each turn's first generated token, and whether the session answered the turn with a
    #: tool error (the fatal rule's "tool-execution error", ``vsearch.fatal``)
    turn_starts: list[int] = field(default_factory=list)
    tool_errors: list[bool] = field(default_factory=list)
    #: the 0-based turn where the episode's run of K consecutive tool errors began (it stopped there), else None
    fatal_step: int | None = None

    def sample_fields(self, **context: Any) -> SampleFields:
        """This trajectory's :class:`~recipe.vsearch.rollout_fields.SampleFields` (the reward's inputs), plus the
        agent loop's ``context`` (role, in-loop statistics, ground truth)."""
        box = self.result.box_original
        # r_format as the fork's reward reads it: an in-loop call (a sub-agent) passes with any <answer> text
        inloop = bool(context.get("is_in_loop"))
        format_ok = self.result.format_ok_inloop if inloop else self.format_ok
        format_error = (self.result.format_error_inloop or self.format_error) if inloop else self.format_error
        return SampleFields(
            # the reward's n_valid_tool_calls: tool calls r_format accepted that got a tool response
            n_tool=int(self.result.n_valid_tool_calls),
            format_ok=bool(format_ok),
            format_error=None if format_ok else (format_error or "format check failed"),
            pred_box=[float(v) for v in box] if box is not None else None,
            search_status=self.result.status,
            search_truncated=bool(self.truncated),
            # the 'original' reward's repeated-view rule reads the crops in the model frame
            crop_boxes=[list(b) for b in self.crop_boxes],
            frame_size=[int(v) for v in self.frame_size],
            image_size=[int(v) for v in self.image_size] if self.image_size is not None else None,
            fatal_step=self.fatal_step,
            fatal_from=mask_start(self.turn_starts, self.fatal_step),
            **context,
        )


#: the largest token id the fork's vSearcher loop accepts (``VSearcherLoop.MAX_ALLOWED_TOKEN_ID``: Qwen2.5-VL's
#: vocabulary; the embedding rows past it are padding)
MAX_ALLOWED_TOKEN_ID = 151664


class PromptTooLong(ValueError):
    """A vSearcher prompt longer than the rollout's prompt length (the episode fails; see
    ``agent_loops.FailSafeAgentLoop``)."""


def budgeted(sampling_params: dict, remaining: int, per_turn: int = LIMITS.vsearcher_max_tokens_per_turn) -> JSONObject:
    """A copy of ``sampling_params`` whose ``max_tokens`` is the turn's cap, at most ``remaining`` (the unused
    part of the trajectory's response budget). The cap is the sampling parameters' own ``max_tokens`` when
    they set one, else ``per_turn`` (1024: the fork's ``VSearcherLoop.MAX_TOKENS_PER_TURN``, set when
    ``max_tokens`` is absent). verl's rollout servers read ``max_tokens`` (vLLM: ``SamplingParams``; without
    it a turn may run to the whole context) and pop it from the dict they get, hence the copy. A turn is
    therefore cut *by the request*, and the protocol judges exactly the tokens that are kept."""
    sp = dict(sampling_params)
    sp.pop("max_new_tokens", None)
    asked = sp.get("max_tokens")
    cap = int(per_turn) if asked is None else int(asked)
    sp["max_tokens"] = min(cap, int(remaining))
    return sp


def template_messages(messages: list[dict]) -> list[JSONObject]:
    """Session messages as the HF chat template wants them: image references become bare
    ``{"type": "image"}`` parts (the pixels travel separately, in order)."""
    out = []
    for m in messages:
        content = m["content"]
        if isinstance(content, list):
            content = [
                {"type": "image"} if p.get("type") == "image" else {"type": "text", "text": p["text"]} for p in content
            ]
        out.append({"role": m["role"], "content": content})
    return out


class PolicySearcher:
    """Runs :class:`SearcherSession` episodes with the policy behind an agent loop's server manager.

    ``agent_loop`` is a verl ``AgentLoopBase`` (it provides ``server_manager``, ``tokenizer`` and
    ``apply_chat_template``). ``response_length`` is the rollout's response budget: every generate
    request asks for at most the budget still unused (``max_tokens``), so a turn that would overrun it
    is cut by the server and judged as cut (``finish_reason="length"``). An episode that runs out of the budget
    (a tool response that does not fit, a turn cut at the budget, a generation the server aborts) is marked
    truncated and ends as ``budget_end_fails_searcher`` says (``vsearch.variant``): ``False`` as the fork's loop
    ends it (:meth:`SearcherSession.end_at_budget`: the last turn's ``<answer>`` is the box, none -> ``invalid``;
    the vReasoner then goes on without a critical failure), ``True`` ``failed`` (the vReasoner episode fails).
    ``limit_reminder``: :class:`SearcherSession`'s (the fork shows the normal reminder after the 6th crop).
    ``fatal_k`` (``vsearch.fatal``; None: off; training rollouts only): the episode stops once ``fatal_k`` consecutive
    turns were answered with a tool error (:func:`insight_o3.protocol.fatal.fatal_step`), at the first of them, without showing the last
    error (:meth:`SearcherSession.end_fatal`: no answer, r_format of the valid prefix).
    """

    def __init__(
        self,
        agent_loop: Any,
        images: ImageStore,
        max_pixels: int,
        max_tool_calls: int,
        response_length: int,
        prompt_length: int | None = None,
        limit_reminder: bool = True,
        budget_end_fails_searcher: bool = True,
        end_on_bad_token: bool = False,
        fatal_k: int | None = None,
    ) -> None:
        self.loop = agent_loop
        self.fatal_k = fatal_k
        self.limit_reminder, self.budget_end_fails_searcher = limit_reminder, budget_end_fails_searcher
        self.end_on_bad_token = end_on_bad_token
        self.prompt_length = prompt_length
        self.images, self.max_pixels, self.max_tool_calls = images, max_pixels, max_tool_calls
        self.response_length = response_length
        tok = agent_loop.tokenizer
        self.im_end = tok.convert_tokens_to_ids("<|im_end|>")
        eos = {self.im_end, tok.eos_token_id, tok.pad_token_id}
        self.stop_ids = {i for i in eos if isinstance(i, int) and i >= 0}
        self.newline_ids = tok.encode("\n", add_special_tokens=False)
        self.pad_id = tok.pad_token_id

    def session(self, image_path: str, description: str) -> SearcherSession:
        return SearcherSession(
            image_path,
            description,
            self.images,
            self.max_pixels,
            "trained",
            self.max_tool_calls,
            limit_reminder=self.limit_reminder,
        )

    def end_at_budget(self, s: SearcherSession, reason: str, **how: Any) -> None:
        """The episode cannot go on within the token budget (see the class doc; ``how``:
        :meth:`SearcherSession.end_at_budget`'s)."""
        if self.budget_end_fails_searcher:
            s.fail(reason)
        else:
            s.end_at_budget(reason, **how)

    def template_ids(
        self, messages: list[dict], images: list[Image.Image], remove_system_prompt: bool = False
    ) -> list[int]:
        """Token ids of ``messages`` with the image pads expanded for ``images`` (blocking: call it in a thread).
        The same steps as verl 0.7's ``AgentLoopBase.apply_chat_template`` with a processor: the processor's
        chat template (generation prompt, the dataset's ``apply_chat_template_kwargs``), the processor on the
        text and images, and the system prompt cut off for a continuation turn."""
        loop = self.loop
        processor = loop.processor
        if processor is None:
            ids = loop.tokenizer.apply_chat_template(
                messages, add_generation_prompt=True, tokenize=True, **loop.apply_chat_template_kwargs
            )
        else:
            text = processor.apply_chat_template(
                messages, add_generation_prompt=True, tokenize=False, **loop.apply_chat_template_kwargs
            )
            ids = processor(text=[text], images=images or None, return_tensors="pt")["input_ids"][0].tolist()
        return list(ids[len(loop.system_prompt) :]) if remove_system_prompt else list(ids)

    async def run(
        self,
        image_path: str,
        description: str,
        sampling_params: dict,
        request_id: str | None = None,
        validate: bool = False,
    ) -> SearcherRollout:
        """One episode; ``validate``: a validation rollout, which runs the evaluation's protocol to its end (no fatal
        stop: validation measures what evaluation would)."""
        request_id = request_id or uuid4().hex
        fatal_k = None if validate else self.fatal_k

        def start() -> tuple[Any, list[Image.Image], list[int]]:
            sess = self.session(image_path, description)
            first = [sess.pil(ref) for ref in sess.image_refs]
            return sess, first, self.template_ids(template_messages(sess.messages), first)

        s, pics, prompt_ids = await asyncio.to_thread(start)
        refs = list(s.image_refs)  # what ``pics`` shows, as references (pixels rebuilt by the trainer's workers)
        if self.prompt_length is not None and len(prompt_ids) > self.prompt_length:
            # verl pads every prompt to rollout.prompt_length and does not truncate: a longer one breaks the batch
            raise PromptTooLong(
                f"the vSearcher's first prompt has {len(prompt_ids)} tokens, more than rollout.prompt_length="
                f"{self.prompt_length} (data.max_prompt_length); description: {description[:200]!r}"
            )
        resp: list[int] = []
        mask: list[int] = []
        logprobs: list[float] | None = []
        texts: list[str] = []
        starts: list[int] = []  # the response position of each generated turn
        tool_errors: list[bool] = []  # per stepped turn: answered with the tool's error text
        fatal: int | None = None
        t_gen = t_tool = 0.0
        truncated = False
        while not s.done:
            if len(resp) >= self.response_length:
                truncated = True
                self.end_at_budget(s, f"response budget of {self.response_length} tokens used up")
                break
            t0 = time.perf_counter()
            out = await self.loop.server_manager.generate(
                request_id,
                prompt_ids=prompt_ids + resp,
                sampling_params=budgeted(sampling_params, self.response_length - len(resp)),
                image_data=list(pics),
            )
            t_gen += time.perf_counter() - t0
            ids = list(out.token_ids)
            starts.append(len(resp))
            resp += ids
            mask += [1] * len(ids)
            if logprobs is not None and out.log_probs is not None and len(out.log_probs) == len(ids):
                logprobs += list(out.log_probs)
            else:
                logprobs = None
            text = self.loop.tokenizer.decode(ids, skip_special_tokens=True)
            texts.append(text)
            if getattr(out, "stop_reason", None) == "aborted":
                self.end_at_budget(s, "generation aborted by the rollout server", pending_text=text)
                break
            finish = "stop" if ids and ids[-1] in self.stop_ids else "length"
            if self.end_on_bad_token and (
                (ids and max(ids) > MAX_ALLOWED_TOKEN_ID) or (self.pad_id is not None and self.pad_id in ids)
            ):
                # the fork's VSearcherLoop ends the episode on an out-of-vocabulary or a pad token
                # (insight_o3_agent_loop.py:152-159), whatever the turn holds
                s.end_at_budget("generated a pad or out-of-vocabulary token", pending_text=text, finish_reason=finish)
                break
            if len(resp) >= self.response_length:
                truncated = finish == "length" or truncated  # cut by the request's max_tokens at the end of the budget
                if not self.budget_end_fails_searcher:
                    # the fork's loop stops on a full budget before it parses the turn (tool_agent_loop.py:237)
                    self.end_at_budget(s, "response budget used up", pending_text=text, finish_reason=finish)
                    break
            n_before = len(s.messages)
            # the fork's hermes parser reads the turn decoded with its special tokens (tool_parser.py)
            st = s.step(text, finish, call_text=self.loop.tokenizer.decode(ids, skip_special_tokens=False))
            if st.done:
                break
            tool_errors.append(st.action == SearcherAction.TOOL_ERROR)
            fatal = None if fatal_k is None else fatal_step(tool_errors, fatal_k)
            if fatal is not None:  # the rollout stops at the fatal step (the released agent: after K bad steps)
                s.end_fatal(fatal, f"{fatal_k} consecutive tool errors from turn {fatal + 1} (fatal)")
                break
            # the tool response the session appended after the assistant turn
            t0 = time.perf_counter()

            def tool_turn(
                ref: ImageRef | None = st.crop, new: list[JSONObject] = template_messages(s.messages[n_before + 1 :])
            ) -> tuple[Image.Image | None, list[int]]:
                if ref is None:  # the tool's error text: a text-only tool response
                    return None, self.template_ids(new, [], remove_system_prompt=True)
                crop_image = s.pil(ref)
                return crop_image, self.template_ids(new, [crop_image], remove_system_prompt=True)

            crop, tool_ids = await asyncio.to_thread(tool_turn)
            if ids and ids[-1] == self.im_end:
                tool_ids = self.newline_ids + tool_ids
            if len(resp) + len(tool_ids) > self.response_length or (
                not self.budget_end_fails_searcher and len(resp) + len(tool_ids) >= self.response_length
            ):
                # never cut through a crop's image tokens: pixels and pads must stay paired; the fork ends the episode
                # when the tool response would reach the budget (``>=``, tool_agent_loop.py:348)
                truncated = True
                self.end_at_budget(
                    s,
                    f"tool response does not fit the {self.response_length}-token response budget",
                    drop_tool_response=True,
                )
                break
            if crop is not None:
                pics.append(crop)
                refs.append(st.crop)
            resp += tool_ids
            mask += [0] * len(tool_ids)
            if logprobs is not None:
                logprobs += [0.0] * len(tool_ids)
            t_tool += time.perf_counter() - t0
        if len(resp) > self.response_length:  # a server that ignored max_tokens: never train past the budget
            truncated = True
            resp, mask = resp[: self.response_length], mask[: self.response_length]
            logprobs = logprobs[: self.response_length] if logprobs is not None else None
        result = s.result()
        # r_format is the session's verdict (the same code the inference vSearcher reports)
        fmt_err = None if result.format_ok else (result.format_error or result.error or "format check failed")
        # the tool boxes r_format accepted, model frame (the fork's reward reads these for its repeated-view rule)
        crops = [[float(v) for v in b] for b in result.tool_boxes]
        return SearcherRollout(
            prompt_ids,
            resp,
            mask,
            logprobs or None,
            pics,
            result,
            texts,
            tuple(s.frame.size),
            bool(result.format_ok),
            fmt_err,
            truncated,
            t_gen,
            t_tool,
            num_turns=len(s.messages) - 1,
            crop_boxes=crops,
            image_size=tuple(s.original_size),
            image_views=ImageViews(tuple(refs), s.resize, self.images.alpha),
            turn_starts=starts,
            tool_errors=tool_errors,
            fatal_step=fatal,
        )
