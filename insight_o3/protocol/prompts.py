"""The prompts of the InSight-o3 protocol: the exact runtime strings of the original release.

Prompts are protocol constants: each string below is character for character what the released
system sends (see ``docs/fidelity.md`` for the source of every one). Sources, in order of
precedence:

* the released evaluation code, github m-Just/InSight-o3 at 21acec8 (``insight_o3/prompts.py``):
  the "think" system prompt, the vReasoner system prompt as released, the three judge prompts;
* the authors' verl fork at the commit that release pins as its ``verl`` submodule
  (m-Just/verl-public, branch ``insight_o3``, 926d137; found in the history of m-Just/InSight-doc):
  ``verl/utils/vsearch_role_play_prompt.py`` (vReasoner prompts as the InSight-o3 system ran them —
  triple-quoted, so each starts and ends with a newline — and ``qa_verify``), the vSearcher system and
  first user prompt of ``insight_o3_agent_loop.py`` and the tool-response text of the recipe's chat
  template (``recipe/vsearch/config/qwen_2_5_vl_7b_async.yaml``);
* the paper (arXiv 2512.18745, App. C.2 and F.2) only for the prompts the code does not contain: the
  simple vSearcher prompt for an untrained Qwen2.5-VL and the region-description prompt (apostrophes
  that the paper's text rendering dropped are restored).

``tests/golden/prompts.json`` pins every string (a change fails a test that names the prompt).
Filling: the judge prompts are ``str.format`` templates (as in the original: ``{{...}}`` in the
open-QA prompt renders as ``{...}``), use :func:`format_judge_prompt`; the vSearcher user prompts are
filled with :func:`fill`, which replaces only the named placeholders (other braces are literal).
"""

import re
from dataclasses import dataclass

# ---------------------------------------------------------------------------- single-model evaluation
#: ``--sys_prompt think`` (released ``SIMPLE_SYSTEM_PROMPT_THINKING``).
THINK_SYSTEM_PROMPT = "A conversation between User and Assistant. The user asks a question, and the Assistant solves it. The assistant first thinks about the reasoning process in the mind and then provides the user with the answer. The reasoning process and answer are enclosed within <think> </think> and <answer> </answer> tags, respectively, i.e., <think> reasoning process here </think><answer> answer here </answer>."

# ---------------------------------------------------------------------------- vReasoner (paper F.1)
#: The vReasoner system prompt exactly as released in ``insight_o3/prompts.py``; the fork's
#: ``vsearch_sys_prompt`` is the same text with a leading and a trailing newline (a test checks).
INSIGHT_O3_VREASONER_SYSTEM_PROMPT = (
    "You are a visual assistant. Your goal is to answer a question based on an image.\n"
    "\n"
    "First, think step by step to identify which visual facts you need from the image to answer the question. If the visual information is insufficient or unclear, call the visual search tool by providing a concise region description:\n"
    "<tool_call> region_description={...} </tool_call>\n"
    "\n"
    "The tool will search the image and return a cropped view of the target region. You may repeat this process until you have enough evidence to answer confidently. The tool is not always precise — evaluate its output critically. If it looks incorrect or off-target, refine your description and try again.\n"
    "\n"
    "Region description guidance:\n"
    "- Use concise, visually grounded targets (e.g., a chart, an object, a text block, a distinct area)\n"
    "- Optionally include approximate location (e.g., top-left, bottom-right, center)\n"
    "- Avoid non-visual or ordinal references (e.g., “the third largest bar”, “the second row's number”)\n"
    "- Describe only one region per tool call; do not request multiple regions in a single description\n"
    "\n"
    "Output format:\n"
    "- Put your reasoning process inside <think>...</think>.\n"
    "- When you need to call the tool, you need to provide the region description using the format <tool_call>region_description={...}</tool_call>.\n"
    "- Immediately after each </think>, do exactly one of:\n"
    "  1) Call the tool; or\n"
    "  2) Provide the final answer (no tool call) — include the result in \\boxed{...}. Do not mix tool calls and answers in the same turn.\n"
    "You **must strictly follow the output format**, otherwise your answer will be judged as wrong.\n"
    "\n"
    "A multi-turn format example:\n"
    "Assistant:\n"
    "<think>{your step-by-step analysis; decide if more detail is needed}</think>\n"
    "<tool_call> region_description={concise, visually grounded target (optionally with location)} </tool_call>\n"
    "\n"
    "User:\n"
    "[Zoomed-in image + guidance (e.g., \"Based on your description, here is the zoomed-in image. Please continue your analysis; you may call the tool again or provide your final answer if sufficient.\")]\n"
    "\n"
    "Assistant:\n"
    "<think>{updated analysis based on the zoomed-in view; decide whether to refine or answer}</think>\n"
    "<tool_call> region_description={next concise target (optionally with location)} </tool_call>\n"
    "\n"
    "(Repeat the User → Assistant pattern as needed until enough evidence is gathered.)\n"
    "\n"
    "Assistant (final turn):\n"
    "<think>{final reasoning; explain why the available visual evidence is sufficient}</think>\n"
    "Answer: \\boxed{...}"
)

#: Inference/evaluation (fork ``vsearch_sys_prompt``; the fork validates with tool feedback off).
VREASONER_INFER_SYSTEM_PROMPT = (
    "\n"
    "You are a visual assistant. Your goal is to answer a question based on an image.\n"
    "\n"
    "First, think step by step to identify which visual facts you need from the image to answer the question. If the visual information is insufficient or unclear, call the visual search tool by providing a concise region description:\n"
    "<tool_call> region_description={...} </tool_call>\n"
    "\n"
    "The tool will search the image and return a cropped view of the target region. You may repeat this process until you have enough evidence to answer confidently. The tool is not always precise — evaluate its output critically. If it looks incorrect or off-target, refine your description and try again.\n"
    "\n"
    "Region description guidance:\n"
    "- Use concise, visually grounded targets (e.g., a chart, an object, a text block, a distinct area)\n"
    "- Optionally include approximate location (e.g., top-left, bottom-right, center)\n"
    "- Avoid non-visual or ordinal references (e.g., “the third largest bar”, “the second row's number”)\n"
    "- Describe only one region per tool call; do not request multiple regions in a single description\n"
    "\n"
    "Output format:\n"
    "- Put your reasoning process inside <think>...</think>.\n"
    "- When you need to call the tool, you need to provide the region description using the format <tool_call>region_description={...}</tool_call>.\n"
    "- Immediately after each </think>, do exactly one of:\n"
    "  1) Call the tool; or\n"
    "  2) Provide the final answer (no tool call) — include the result in \\boxed{...}. Do not mix tool calls and answers in the same turn.\n"
    "You **must strictly follow the output format**, otherwise your answer will be judged as wrong.\n"
    "\n"
    "A multi-turn format example:\n"
    "Assistant:\n"
    "<think>{your step-by-step analysis; decide if more detail is needed}</think>\n"
    "<tool_call> region_description={concise, visually grounded target (optionally with location)} </tool_call>\n"
    "\n"
    "User:\n"
    "[Zoomed-in image + guidance (e.g., \"Based on your description, here is the zoomed-in image. Please continue your analysis; you may call the tool again or provide your final answer if sufficient.\")]\n"
    "\n"
    "Assistant:\n"
    "<think>{updated analysis based on the zoomed-in view; decide whether to refine or answer}</think>\n"
    "<tool_call> region_description={next concise target (optionally with location)} </tool_call>\n"
    "\n"
    "(Repeat the User → Assistant pattern as needed until enough evidence is gathered.)\n"
    "\n"
    "Assistant (final turn):\n"
    "<think>{final reasoning; explain why the available visual evidence is sufficient}</think>\n"
    "Answer: \\boxed{...}\n"
)

#: Training (fork ``vsearch_sys_prompt_with_feedback``, used when ``enable_tool_feedback`` is on).
VREASONER_TRAIN_SYSTEM_PROMPT = (
    "\n"
    "You are a visual assistant. Your goal is to answer a question based on an image.\n"
    "\n"
    "First, think step by step to identify which visual facts you need from the image to answer the question. If the visual information is insufficient or unclear, call the visual search tool by providing a concise region description:\n"
    "<tool_call>region_description={...}</tool_call>\n"
    "\n"
    "The tool will search the image and return a cropped view of the target region. You may repeat this process until you have enough evidence to answer confidently. The tool is not always precise — evaluate its output critically. If it looks incorrect or off-target, refine your description and try again.\n"
    "\n"
    "Region description guidance:\n"
    "- Use concise, visually grounded targets (e.g., a chart, an object, a text block, a distinct area)\n"
    "- Optionally include approximate location (e.g., top-left, bottom-right, center)\n"
    "- Avoid non-visual or ordinal references (e.g., “the third largest bar”, “the second row's number”)\n"
    "- Describe only one region per tool call; do not request multiple regions in a single description\n"
    "\n"
    "Output format:\n"
    "- Put your reasoning process inside <think>...</think>.\n"
    "- Immediately after </think>, output your assessment of the most recent tool result (if any) formatted as <tool_feedback>helpful/unhelpful</tool_feedback>.\n"
    "  This should indicate whether the result returned by the previous tool call is relevant to your prior region description and helpful to answering the question. If it misses the key information you are looking for, it is unhelpful. If no previous tool result exists (e.g., the first turn), output <tool_feedback>NA</tool_feedback>.\n"
    "- Immediately after </tool_feedback>, do exactly one of:\n"
    "  1) Call the tool; or\n"
    "  2) Provide the final answer (no tool call) — include the result in \\boxed{...}. Do not mix tool calls and answers in the same turn.\n"
    "- If you need to call the tool, provide the region description using the exact format <tool_call>region_description={...}</tool_call>.\n"
    "You **must strictly follow the output format**, otherwise your answer will be judged as wrong.\n"
    "\n"
    "A multi-turn format example:\n"
    "Assistant:\n"
    "<think>{your step-by-step analysis; decide if more detail is needed}</think>\n"
    "<tool_feedback>NA</tool_feedback>\n"
    "<tool_call>region_description={concise, visually grounded target (optionally with location)}</tool_call>\n"
    "\n"
    "User:\n"
    "[Zoomed-in image + guidance (e.g., \"Based on your description, here is the zoomed-in image. Please continue your analysis; you may call the tool again or provide your final answer if sufficient.\")]\n"
    "\n"
    "Assistant:\n"
    "<think>{updated analysis based on the zoomed-in view; decide whether to refine or answer}</think>\n"
    "<tool_feedback>unhelpful</tool_feedback>\n"
    "<tool_call>region_description={next concise target (optionally with location)}</tool_call>\n"
    "\n"
    "(Repeat the User → Assistant pattern as needed until enough evidence is gathered.)\n"
    "\n"
    "Assistant (final turn):\n"
    "<think>{final reasoning; explain why the available visual evidence is sufficient}</think>\n"
    "<tool_feedback>helpful</tool_feedback>\n"
    "Answer: \\boxed{...}\n"
)

#: After a found region (with the crop) — fork ``vsearch_user_hint``.
VREASONER_CONTINUE_PROMPT = (
    "\n"
    "Based on your description, here is the zoomed-in image.\n"
    "\n"
    "Please continue your analysis. You may:\n"
    "- Call the tool again if you believe more visual detail is needed; or\n"
    "- Provide your final answer if the current information is sufficient.\n"
)

#: After the last allowed search (with its crop, if any) — fork ``vsearch_user_hint_last_round``.
VREASONER_LIMIT_PROMPT = (
    "\n"
    "Based on your description, here is the zoomed-in image.\n"
    "\n"
    "You have reached the limit for using the visual tool and cannot call it again.\n"
    "In this turn, based on the available information, provide your final answer using the required format.\n"
)

#: After a search that found nothing — fork ``vsearch_user_hint_fail``.
VREASONER_NOT_FOUND_PROMPT = (
    "\n"
    "The visual searcher could not locate the requested target in the image based on your description.\n"
    "\n"
    "Please adjust or refine your region description (for example, refer to a larger, clearly visible area) and continue your analysis. You may:\n"
    "- Call the tool again with a revised description; or\n"
    "- Provide your final answer if the current information is sufficient.\n"
)

#: After a turn with neither a tool call nor ``\\boxed{}`` — fork ``format_user_hint``.
VREASONER_FORMAT_RETRY_PROMPT = (
    "\n"
    "In your previous response, neither a tool call nor a final boxed answer was detected.\n"
    "\n"
    "Please do exactly one of the following:\n"
    "- If you still need more visual detail, call the tool using the exact format:\n"
    "  <tool_call>region_description={...}</tool_call>\n"
    "- Otherwise, provide the final answer now and include the result in \\boxed{...}.\n"
)

# The released fork sends the same four user hints in training and at inference (only the system
# prompt asks for ``<tool_feedback>`` in training). The paper's F.1 training hints that also ask for
# feedback appear in the fork only after the release (docs/fidelity.md, "Training"); the recipe's
# ``vsearch.variant=paper`` trains with them (below).
VREASONER_INFER_CONTINUE_PROMPT = VREASONER_TRAIN_CONTINUE_PROMPT = VREASONER_CONTINUE_PROMPT
VREASONER_INFER_LIMIT_PROMPT = VREASONER_TRAIN_LIMIT_PROMPT = VREASONER_LIMIT_PROMPT
VREASONER_INFER_NOT_FOUND_PROMPT = VREASONER_TRAIN_NOT_FOUND_PROMPT = VREASONER_NOT_FOUND_PROMPT
VREASONER_INFER_FORMAT_RETRY_PROMPT = VREASONER_TRAIN_FORMAT_RETRY_PROMPT = VREASONER_FORMAT_RETRY_PROMPT

# The paper's F.1 *training* hints, each asking again for ``<tool_feedback>``. Where the paper's words
# are the fork's (m-Just/verl-public cb0d3ff, 2026-01-29, after the release,
# ``verl/utils/vsearch_role_play_prompt_with_tool_feedback.py``), the fork's exact string (``.strip()``-ed:
# no outer newlines); the paper's rendering only lost the blank lines.
#: After a found region (with the crop) — paper F.1 = cb0d3ff ``vsearch_user_hint``.
VREASONER_PAPER_TRAIN_CONTINUE_PROMPT = (
    "Based on your description, here is the zoomed-in image.\n"
    "\n"
    "Please continue your analysis. After the analysis, state your assessment of the previous tool result using <tool_feedback>helpful/unhelpful</tool_feedback>, then do one of the following:\n"
    "- Call the tool again if you believe more visual detail is needed; or\n"
    "- Provide your final answer if the current information is sufficient."
)

#: After the last allowed search (with its crop, if any) — paper F.1 = cb0d3ff ``vsearch_user_hint_last_round``.
VREASONER_PAPER_TRAIN_LIMIT_PROMPT = (
    "Based on your description, here is the zoomed-in image.\n"
    "\n"
    "You have reached the limit for using the visual tool and cannot call it again.\n"
    "In this turn, after reasoning step by step, output your assessment of the previous tool result using exactly <tool_feedback>helpful/unhelpful</tool_feedback>, and then, based on the available information, provide your final answer using the required format."
)

#: After a search that found nothing — paper F.1 = cb0d3ff ``vsearch_user_hint_fail``.
VREASONER_PAPER_TRAIN_NOT_FOUND_PROMPT = (
    "The visual searcher could not locate the requested target in the image based on your description.\n"
    "\n"
    "Please adjust or refine your region description (for example, refer to a larger, clearly visible area) and continue your analysis. Think first, then state your assessment of the previous tool result using <tool_feedback>helpful/unhelpful</tool_feedback>. Finally, do exactly one of the following:\n"
    "- Call the tool again with a revised description; or\n"
    "- Provide your final answer if the current information is sufficient."
)

#: After a turn without a tool call, a ``\boxed{}`` answer or a valid ``<tool_feedback>`` — the paper's F.1 words
#: ("was detected, or you didn't output", where cb0d3ff ``format_user_hint`` says "was provided (or the format is
#: incorrect), or"), laid out as cb0d3ff writes the same words: blank line, two-space indent, ASCII apostrophe,
#: one backslash (the paper shows "didnt" and "\\boxed" and drops the line breaks).
VREASONER_PAPER_TRAIN_FORMAT_RETRY_PROMPT = (
    "In your previous response, neither a tool call nor a final boxed answer was detected, or you didn't output your assessment of the previous tool result in the correct format.\n"
    "\n"
    "Think first, and then include your assessment of the previous tool result using exactly <tool_feedback>helpful/unhelpful</tool_feedback> (or <tool_feedback>NA</tool_feedback> if there is no previous result). Finally, do exactly one of the following:\n"
    "- If you still need more visual detail, call the tool using the exact format:\n"
    "  <tool_call>region_description={...}</tool_call>\n"
    "- Otherwise, provide the final answer now and include the result in \\boxed{...}."
)


@dataclass(frozen=True)
class ReasonerHints:
    """The vReasoner's four user hints: after a found region, after the last allowed search, after a
    search that found nothing, after a malformed turn."""

    found: str
    limit: str
    not_found: str
    format_retry: str


#: The fork's hints (926d137): evaluation, and training under ``vsearch.variant=original``.
FORK_HINTS = ReasonerHints(
    VREASONER_CONTINUE_PROMPT, VREASONER_LIMIT_PROMPT, VREASONER_NOT_FOUND_PROMPT, VREASONER_FORMAT_RETRY_PROMPT
)
#: The paper's F.1 training hints: training under ``vsearch.variant=paper``.
PAPER_TRAIN_HINTS = ReasonerHints(
    VREASONER_PAPER_TRAIN_CONTINUE_PROMPT,
    VREASONER_PAPER_TRAIN_LIMIT_PROMPT,
    VREASONER_PAPER_TRAIN_NOT_FOUND_PROMPT,
    VREASONER_PAPER_TRAIN_FORMAT_RETRY_PROMPT,
)
#: the hint sets by name (``recipe.vsearch.settings.Protocol.reasoner_train_hints``)
REASONER_HINTS = {"fork": FORK_HINTS, "paper_f1": PAPER_TRAIN_HINTS}

# ---------------------------------------------------------------------------- vSearcher (paper F.2)
#: Trained vSearcher (InSight-o3-vS): system prompt of the fork's agent loop (DeepEyes-style).
VSEARCHER_SYSTEM_PROMPT = (
    "You are a helpful assistant.\n"
    "\n"
    "# Tools\n"
    "You may call one or more functions to assist with the user query.\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n"
    "<tools>\n"
    "{\"type\":\"function\",\"function\":{\"name\":\"image_zoom_in_tool\",\"description\":\"Zoom in on a specific region of an image by cropping it based on a bounding box (bbox) and an optional object label.\",\"parameters\":{\"type\":\"object\",\"properties\":{\"bbox_2d\":{\"type\":\"array\",\"items\":{\"type\":\"number\"},\"minItems\":4,\"maxItems\":4,\"description\":\"The bounding box of the region to zoom in, as [x1, y1, x2, y2], where (x1, y1) is the top-left corner and (x2, y2) is the bottom-right corner.\"},\"label\":{\"type\":\"string\",\"description\":\"The name or label of the object in the specified bounding box (optional).\"}},\"required\":[\"bbox\"]}}}\n"
    "</tools>\n"
    "\n"
    "# How to call a tool\n"
    "Return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n"
    "<tool_call>\n"
    "{\"name\": <function-name>, \"arguments\": <args-json-object>}\n"
    "</tool_call>\n"
    "\n"
    "**Example**:  \n"
    "<tool_call>  \n"
    "{\"name\": \"image_zoom_in_tool\", \"arguments\": {\"bbox_2d\": [10, 20, 100, 200], \"label\": \"the apple on the desk\"}}  \n"
    "</tool_call>"
)

#: First user turn, sent after the image (``[image, text]``); ``{target}`` is the region description.
VSEARCHER_FIRST_USER_PROMPT = (
    "\n"
    "Locate {target}.\n"
    "Think first, call **image_zoom_in_tool** if needed, then answer with the bbox coordinates in [x1, y1, x2, y2] format (or [0, 0, 0, 0] if you can't locate it). Format strictly as:  <think>...</think>  <tool_call>...</tool_call> (if tools needed)  <answer>[x1, y1, x2, y2]</answer> (otherwise)"
)

#: Tool response turn: ``<tool_response>``, the crop, then ``</tool_response>\n`` + this text.
VSEARCHER_TOOL_RESPONSE_PROMPT = "Think first, call **image_zoom_in_tool** if needed, then answer with the bbox coordinates in [x1, y1, x2, y2] format (or [0, 0, 0, 0] if you can't locate it). Format strictly as:  <think>...</think>  <tool_call>...</tool_call> (if tools needed)  <answer>[x1, y1, x2, y2]</answer> (otherwise)"

#: Tool response after the last allowed crop (the chat template's limit branch; note the final space).
VSEARCHER_LIMIT_PROMPT = (
    "You have reached the tool call limit and cannot call tools anymore.\n"
    "Think first, then answer with the bbox coordinates in [x1, y1, x2, y2] format (or [0, 0, 0, 0] if you can't locate it). Format strictly as:  <think>...</think>  <answer>[x1, y1, x2, y2]</answer> "
)

#: Text between ``</tool_response>`` and the reminder in a tool response turn.
VSEARCHER_TOOL_RESPONSE_CLOSE = "</tool_response>\n"

#: Simple prompt for an untrained Qwen2.5-VL vSearcher (paper F.2 only; text before the image).
VSEARCHER_SIMPLE_SYSTEM_PROMPT = "You are a helpful assistant."

VSEARCHER_SIMPLE_USER_PROMPT = (
    "Given an image and a region description, locate the region that best matches the description and output its bounding box coordinates as [x_min, y_min, x_max, y_max].\n"
    "If the target cannot be found, output [0, 0, 0, 0].\n"
    "Region description:\n"
    "{target}\n"
    "Now, output the coordinates in format [x_min, y_min, x_max, y_max]:"
)

# ---------------------------------------------------------------------------- judge
#: Answer extraction for multiple-choice questions (released ``GPT_EVAL_MCQA_PROMPT``).
MCQ_EXTRACTION_PROMPT = (
    "You are given a multiple-choice question with its options and a model-generated answer.  \n"
    "Your task is to determine which option letter (A, B, C, D, E, F, etc.) best matches the model's answer.  \n"
    "\n"
    "### Instructions\n"
    "- Compare the model's answer with the provided options.  \n"
    "- Output **only the single option letter** (e.g., `A`, `B`, `C`, `D`).  \n"
    "- Do not output anything else.  \n"
    "\n"
    "### Input\n"
    "Question: {question}  \n"
    "Options: {options}  \n"
    "Model Answer: {model_answer}  \n"
    "\n"
    "### Output\n"
    "<letter>"
)

#: Answer extraction for open questions (released ``GPT_EVAL_OPEN_QA_PROMPT``).
OPEN_QA_EXTRACTION_PROMPT = (
    "You are given a question and a model-generated response.  \n"
    "Your task is to extract the single word or short phrase that best matches the model's response and answer the question.\n"
    "\n"
    "### Instructions\n"
    "- Focus on the model’s **final** response: prefer content inside `<answer>...</answer>` or `\\boxed{{...}}`; otherwise take the last decisive span.\n"
    "- Trim whitespace; strip quotes/LaTeX/markdown; keep number+unit together; compress full sentences to the minimal response.\n"
    "- Output **only** that word/phrase (≤5 words). No extra text, quotes, or punctuation.\n"
    "\n"
    "### Input\n"
    "Question: {question}  \n"
    "Model Response: {model_response}\n"
    "\n"
    "### Output\n"
    "<answer>"
)

#: Verification of an extracted open answer (released ``GPT_JUDGE_ANSWER_PROMPT``, paper F.3).
JUDGE_PROMPT = (
    "You are given an image-based question, the ground truth (GT) answer, and a model's answer.  \n"
    "\n"
    "Compare the model's answer with the GT answer:\n"
    "\n"
    "- If the model's answer matches the GT answer visually or semantically, reply with <correct>.\n"
    "- If it doesn't match, or if uncertain, reply with <wrong>.\n"
    "\n"
    "Only reply with <correct> or <wrong>, no explanations.\n"
    "\n"
    "Question: {question}\n"
    "GT Answer: {gt_answer}\n"
    "Model Answer: {model_answer}\n"
    "\n"
    "### Output\n"
    "<correct> or <wrong>"
)

#: The fork's in-loop verification prompt (``qa_verify``): training rewards and InSight-o3 validation.
QA_VERIFY_PROMPT = (
    "\n"
    "You are given an image-based question, the ground truth (GT) answer, and a model's answer.  \n"
    "\n"
    "Compare the model's answer with the GT answer:\n"
    "\n"
    "- If the model's answer matches the GT answer visually or semantically, reply with <correct>.\n"
    "- If it doesn't match, or if uncertain, reply with <wrong>.\n"
    "\n"
    "Only reply with <correct> or <wrong>, no explanations.\n"
    "\n"
    "Question: {question}\n"
    "GT Answer: {gt_answer}\n"
    "Model Answer: {model_answer}\n"
)


def format_judge_prompt(template: str, **values: object) -> str:
    """Fill a judge prompt as the original does (``str.format``: ``{{...}}`` becomes ``{...}``)."""
    return template.format(**values)


def fill(template: str, **values: str) -> str:
    """Replace ``{name}`` placeholders literally, in one pass (other braces are left alone)."""
    for name in values:
        if "{" + name + "}" not in template:
            raise KeyError(f"placeholder {{{name}}} not in prompt")
    pattern = re.compile("|".join(re.escape("{" + n + "}") for n in values))
    return pattern.sub(lambda m: str(values[m.group(0)[1:-1]]), template)


# ---------------------------------------------------------------------------- C.2: region descriptions
# Out-of-loop RL data: GPT-5-nano describes the region inside a red box (paper C.2 only; the paper's
# rendering dropped the apostrophes of "can't", "Don't" (twice) and "row's", restored here).
REGION_DESCRIPTION_SYSTEM_PROMPT = (
    "You are a visual assistant. Your goal is to help the user to locate the region indicated by the red bounding box in an image.\n"
    "When the user asks you to describe the region, you must follow the following rules:\n"
    "- Keep it super simple and short as if you can't see clearly what is in the region.\n"
    "- Don't mention any details, specific content, or small text in the region.\n"
    "- Use concise, visually grounded targets (e.g., a chart, an object, a text block, a distinct area).\n"
    "- Optionally include approximate location (e.g., top-left of the image, bottom-right of the big chart, center column).\n"
    "- Optionally include the title of the region (e.g., the table about XXX, the section titled XXX).\n"
    "- Avoid non-visual or ordinal references (e.g., \"the third largest bar\", \"the second row's number\").\n"
    "- Don't mention the red bounding box.\n"
    "Output format: region_description={...}"
)

REGION_DESCRIPTION_USER_PROMPT = "Describe the region in the red bounding box."
