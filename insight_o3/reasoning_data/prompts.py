"""The data engine's prompts and request settings: the released ones (``data_generation/data_generation.py`` and
``data_check.py`` of dongyh20/Insight-V at 5e9c6f9, recorded by running them: tests/golden/insight_v.json) and the
tier-2 scoring prompt, which the release does not have (ours, written from the seed text's description; docs/fidelity.md
rows IVD*).

The released strings are kept byte for byte, with their quirks (the indentation of their triple-quoted source, the
typos, the missing colon in ``"next_action" "xxx"``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# ----------------------------------------------------------------------------- progressive generation (released)
STEP_SYSTEM_PROMPT = 'You are an expert AI assistant that explains your reasoning step by step. For each step, provide a title that describes what you\'re doing in that step, along with the content. Decide if you need another step or if you\'re ready to give the final answer. Respond in JSON format with \'title\', \'content\', and \'next_action\' (either \'continue\' or \'final_answer\') keys. USE AT LEAST 2 STEPS OF REASONING. BE AWARE OF YOUR LIMITATIONS AS AN LLM AND WHAT YOU CAN AND CANNOT DO. IN YOUR REASONING, INCLUDE EXPLORATION OF ALTERNATIVE ANSWERS. CONSIDER YOU MAY BE WRONG, AND IF YOU ARE WRONG IN YOUR REASONING, WHERE IT WOULD BE. FULLY TEST ALL OTHER POSSIBILITIES. YOU CAN BE WRONG. WHEN YOU SAY YOU ARE RE-EXAMINING, ACTUALLY RE-EXAMINE, AND USE ANOTHER APPROACH TO DO SO. DO NOT JUST SAY YOU ARE RE-EXAMINING. USE AT LEAST 3 METHODS TO DERIVE THE ANSWER. USE BEST PRACTICES.\n                Example of a valid JSON response:\n                {\n                "title": "Identifying Key Information",\n                "content": "To begin solving this problem, we need to carefully examine the given information and identify the crucial elements that will guide our solution process. This involves...",\n                "next_action": "continue"\n                }\n                STRICTLY FOLLOW THE JSON RESPONSE FORMAT. THE RESPONDE SHOULD START WITH "{". DO NOT START WITH "```json" OR ANYTHING ELSE.\n                '
PREFILL = 'Thank you! I will now think step by step following my instructions, starting at the beginning after decomposing the problem.'
CONTINUE_PROMPT = '\n                Please continue provide detailed, step-by-step explanations of your thought process. And response in a valid JSON response.\n                Use JSON with keys: \'title\', \'content\', \'next_action\' (values: \'continue\' if you think you need to continue explain to answer the question correctly, or \'final_answer\' if you think you can correctly answer the question based on the above step-by-step explaintion)\n                Noting: the value of \'next_action\' is continue, the content of this step must be very different from previous content. Otherwise, please set \'next_action\' to final_answer.\n                Example of a valid JSON response:\n                {\n                "title": "xxx",(Summarize this step response)\n                "content": "xxx", (Please provide an one-more different step analysis here that you believe is likely to answer the question correctly)\n                "next_action" "xxx",  ("continue" or "final_answer")\n                }\n                If "next_action" in previous round is "continue", then you have to strictly follow the JSON format and DO NOT DIRECTLY PROVIDE THE ANSWER IN THIS ROUND. The JSON response must have "title", "content" and "next_action".\n                YOU SHOULD ONLY PERFORM ONE STEP REASONING AT A TIME. DO NOT PROVIDE MULTIPLE STEPS IN ONE RESPONSE.\n                '
REPAIR_PROMPT = '\n                    Please response in a valid JSON response.\n                    Response Format:\n                    {\n                        "title": "xxx", (Summarize this step response)\n                        "content": "xxx", (Please provide an one-more different step analysis here that you believe is likely to answer the question correctly)\n                        "next_action" "xxx",  ("continue" or "final_answer")\n                    }\n                    '
FINAL_PROMPT = 'Please provide the final answer based solely on your reasoning above. USE JSON FORMAT. Retain any formatting as instructed by the original prompt, such as exact formatting for free response or multiple choice.\n        Example of a valid FINAL ANSWER response:\n        {\n        "title": "FINAL ANSWER",\n        "content": "The answer to the question"\n        }\n        MAKE SURE TO FOLLOW the formatting as instructed by the original prompt in the answer.\n        '
#: the generator's sampling (``SamplingParams`` l. 24-30; the ``max_tokens`` argument of ``make_api_call`` is unused:
#: every request, the final answer's included, has 1024)
GENERATION_KWARGS: Mapping[str, Any] = {
    "temperature": 0.7,
    "top_p": 0.95,
    "max_tokens": 1024,
    "extra_body": {"repetition_penalty": 1.05},
}
#: attempts per step (``for retry in range(3)``); after the third failure the step is the release's ``Error`` step
STEP_ATTEMPTS = 3
#: the loop stops after the step whose count exceeds this (``step_count > 15``): at most 16 steps
STEP_CAP = 15
#: the image bounds of the user message (``min_pixels`` / ``max_pixels``, qwen_vl_utils' ``smart_resize``, factor 28)
IMAGE_MIN_PIXELS, IMAGE_MAX_PIXELS = 224 * 224, 1280 * 28 * 28

# ----------------------------------------------------------------------------- tier 1: the answer check (released)
CHECK_PROMPT = 'I will give you a question, the ground truth answer and one answers generated by another model. You need to judge whether the answer is correct or not based on the ground truth answer. As long as the answer has the same meaning with the ground truth answer, even if the format is not completely the same, it is correct. For each question, if the answer is correct, just return 1. If the answer is incorrect, return 0. You should only return 1 or 0 for each question. The output should be a list containing your judgement of the answer. Here is an example:\n——Example 1——\nQuestion: <image>\nWhat company held 15 percent of the microwave oven market in the United States in 2008?\nAnswer the question using a single word or phrase.\nGround Truth: Samsung.\nModel 1: Samsung and Sharp held 15 percent of the microwave oven market share in the United States in 2008.\nYour answer: [0]\n——Example 2——\nQuestion: <image>\nWhat company held 15 percent of the microwave oven market in the United States in 2008?\nAnswer the question using a single word or phrase.\nModel 1: Samsung held 15 percent of the microwave oven market in the United States in 2008.\nYour answer: [1]\n\nNow please generate your answers based on the given questions, ground truth answers and model answers. Please note that you should only output the list of your answers, strictly follow the format.   \n'
#: the check's system message: ``f"You are a helpful assistant.\n{prompt}"`` (``data_check.py`` l. 57)
CHECK_SYSTEM_PROMPT = "You are a helpful assistant.\n" + CHECK_PROMPT
#: the user message (l. 54): ``f"Question: {question}\nGround Truth: {ground_truth}\nModel 1: {response[0]}\nYour answer: "``
CHECK_USER_TEMPLATE = "Question: {question}\nGround Truth: {ground_truth}\nModel 1: {response}\nYour answer: "
#: what the check is given for a final answer that is not JSON with a ``content`` (l. 45-52)
NO_ANSWER = "No available answer"
CHECK_KWARGS: Mapping[str, Any] = {
    "temperature": 0.2,
    "top_p": 0.7,
    "max_tokens": 512,
    "extra_body": {"repetition_penalty": 1.05},
}

# ----------------------------------------------------------------------------- tier 2: chain scoring (ours)
#: What the scoring MLLM weighs, from the seed text ("scores it from 1 to 100 based on: Logic ..., Hallucination ...,
#: Completeness ..."); recorded in the score step's card.
SCORE_RUBRIC = (
    "Logic: does each step follow from the steps before it and from the image?",
    "Hallucination: does any step state a visual detail that is not in the image?",
    "Completeness: does the chain skip a step the answer needs?",
)
SCORE_PROMPT = (
    "You are given an image, a question about it, its ground-truth answer, and a step-by-step reasoning process "
    "written by another model that reaches this answer. Score the quality of the reasoning process from 1 to 100 "
    "on three criteria:\n"
    + "\n".join(f"- {c}" for c in SCORE_RUBRIC)
    + "\nA process that reaches the right answer through wrong logic or invented visual details must get a low "
    "score.\n\nQUESTION: {question}\n\nGROUND TRUTH: {ground_truth}\n\nREASONING PROCESS:\n{chain}\n\n"
    'Reply with one JSON object and nothing else: {{"logic": <1-100>, "hallucination": <1-100>, '
    '"completeness": <1-100>, "score": <1-100>}} where "hallucination" is high when nothing is invented and "score" '
    "is your overall score."
)
#: deterministic scoring (ours)
SCORE_KWARGS: Mapping[str, Any] = {"temperature": 0.0, "max_tokens": 512}
