"""OpenSearch-VL's Visual Investigation Agent (github shawn0728/OpenSearch-VL at c5c02a4, ``opensearch_vl/``) as a
sans-IO session: the rules of its released inference (``run_infer.py`` with a Qwen3-VL runner), over the chat API.
Sources (docs/fidelity.md rows O*):

* ``opensearch_infer/prompts.py``: :data:`SYSTEM_PROMPT`; ``runners.py`` ``Qwen3VLRunner._prepend_system``: the
  system prompt goes first in the first user message (``SYSTEM_PROMPT + "\\n\\n"``), not as a system message;
* ``pipeline.py`` ``process_single_case``: the first user message is ``[system prompt, img_1, "<tools>\\n" +
  tools + "\\n</tools>" + "\\n\\n" + question]``; at most :data:`MAX_TURNS` model turns; a reply with
  ``<response>`` (and ``</response>`` or ``boxed{``) ends the episode, so does a reply without a tool call; a call's
  result goes back as ``"<observation>\\n{result}\\n</observation>"`` in a user message, with each image the call
  made; the answer is every reply joined by a blank line (``final_response_text``);
* ``tools.py``: :data:`TOOLS` (``get_tools_definition``), :func:`extract_tool_call` (``<tool_call>`` JSON, then the
  fallback tags, ``query``/``lang`` read as ``q``/``hl``) and ``execute_tool``'s names (``local_search`` and
  ``web_search`` run ``text_search``; ``local_image_search`` and ``lens_scan`` run ``image_search``); the tools
  themselves are :mod:`insight_o3.tools`;
* ``runners.py`` ``InferenceConfig`` / ``run_infer.py``: greedy decoding, 32768 new tokens a turn.

The parser is linear in the reply's length (no backtracking regex) and returns what the release's regexes return
(property-tested against them; golden cases recorded by running the release).
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..base.json_types import JSONObject
from ..base.untrusted import loads
from ..imaging.images import ImageRef
from ..protocol.agent_catalog import OPENSEARCH_VL
from ..protocol.trajectory import image_part, message, message_text
from ..tools.choices import TOOL_SETS
from .tool_agents import AgentDefaults, AgentSpec, Ask, Finish, ShownImage, UseTool

PROTOCOL_VERSION = "opensearch_vl@c5c02a4:opensearch_vl/opensearch_infer"

#: ``opensearch_infer/prompts.py`` SYSTEM_PROMPT (recorded: tests/golden/record_opensearch_vl_goldens.py)
SYSTEM_PROMPT = """
You are an advanced **Visual Investigation Agent**. Your goal is to answer user questions with maximum precision by proactively using a suite of powerful image processing and retrieval tools.

**CORE PHILOSOPHY: "Verify, Don't Guess"**
1. **Tool-First Mindset**: Do not rely solely on your internal visual encoder if a tool can provide a clearer view or exact text. If text is small, **Crop** it. If text is blurry, **Sharpen** it. If the image is tilted, **Correct Perspective**.
2. **Chain Your Tools**: Complex problems often require a sequence of actions (e.g., `perspective_correct` -> `crop` -> `layout_parsing`). Do not stop at the first step.
3. **Layout Parsing Workflow Rule**: For document images, use `layout_parsing` to extract structured text. You can optionally `crop` the document region first if needed, then use `layout_parsing` directly on the image reference (e.g., `img_1`).
4. **External Validation**: If a question involves specific entities, facts, or context not purely visible in the pixel data, you **MUST** use `text_search` to verify.

---

### 1. TOOL CALLING FORMAT

You may call one or more functions to assist with the user query. You are provided with function signatures within `<tools></tools>` XML tags.

**How to call a tool**: Return a JSON object with function name and arguments within `<tool_call></tool_call>` XML tags:

<tool_call>
{"name": <function-name>, "arguments": <args-json-object>}
</tool_call>

**Example**:
<tool_call>
{"name": "crop", "arguments": {"image": "img_1", "x": 0, "y": 0, "width": 200, "height": 100}}
</tool_call>

---

### 2. YOUR TOOLBOX & TRIGGER CONDITIONS

**A. Visual Perception Tools**
* **`crop`**:
    * *Trigger*: The target (text/object) covers < 30% of the image, or multiple distinct sections need analysis.
    * *Benefit*: drastically improves OCR and recognition accuracy by removing noise.
    * *Params*: `{"image": "img_n", "x": int, "y": int, "width": int, "height": int}`

* **`layout_parsing`** (using Layout Parsing API):
    * *Trigger*: Document images with structured text (paragraphs, titles, footnotes). **NEVER transcribe text manually**; always use layout parsing for ground truth.
    * *Workflow*: `crop` (optional) -> `layout_parsing` (on the image reference)
    * *Params*: `{"image": "img_n", "use_chart_recognition": false, "use_doc_orientation_classify": false}` or `{"file_path": "/absolute/path/to/image.png", ...}` (file_path is optional, image reference is preferred)
    * *Output*: Returns detected text blocks with structured content. **IMPORTANT**: The layout parsing result will clearly show "Layout Parsing SUCCESS" if text is detected, followed by "ALL RECOGNIZED TEXT" section. **ALWAYS use the text from the layout parsing result** - do not ignore it or claim "no text detected" if layout parsing returns text. If layout parsing shows text, that is the ground truth.

**B. Image Enhancement Tools (The "Pre-processing Pipeline")**
* **`perspective_correct`**:
    * *Trigger*: Document is photographed at an angle, trapezoidal shapes, or text lines are not horizontal.
    * *Params*: `{"image": "img_n"}`
* **`super_resolution`**:
    * *Trigger*: Image is pixelated, low-res (e.g., < 500px width), or text strokes are broken.
    * *Params*: `{"image": "img_n", "scale": 4}`
* **`sharpen`**:
    * *Trigger*: Motion blur, out-of-focus text, or soft edges.
    * *Params*: `{"image": "img_n", "amount": 1.5}`

**C. Knowledge Retrieval Tools**
* **`text_search`** (Text Search with AI Summarization):
    * *Trigger*: Questions about "Who/What/When/Where", specific terminology, facts requiring external knowledge, or when you need up-to-date information not visible in the image.
    * *How it works*: This tool combines **Serper API** (web search), **JINA Reader** (webpage content extraction), and **Qwen3-32B** (AI summarization). It searches the web, extracts full webpage content, and generates query-focused summaries.
    * *Params*: `{"q": "search query", "hl": "en", "top_k": 5}`
        - `q` (required): The search query string
        - `hl` (optional): Language code (default: "en")
        - `top_k` (optional): Number of results to return and summarize (default: 5)
    * *Output*: Returns a list of summarized passages from top-k relevant webpages, each with title, URL, and AI-generated summary focused on your query. **Use these summaries as reliable sources** - they are already processed and condensed for relevance.
* **`image_search`** (Visual Search):
    * *Trigger*: Need to identify an unknown object, finding similar styles, or understanding scene context.
    * *Params*: `{"url": "image_url"}` (url can be an image reference like "img_1" or a direct URL)
    * *Output*: Returns AI-summarized results with only "title" and "source" fields, filtered by Qwen3-32B to remove irrelevant information.
    * **CRITICAL WORKFLOW RULE**: After using `image_search`, you **MUST** follow up with `text_search` to get detailed information about the identified entities. Image search only provides initial identification - text search provides the comprehensive facts you need for your answer.

---

### 3. THE THINKING PROTOCOL (<think>)

Before generating ANY tag, you must perform a structured analysis inside `<think>` tags. You must evaluate the **Image Quality** and **Information Gap**.

**Mandatory Thinking Structure:**
1.  **Analyze Request**: What is the user actually looking for?
2.  **Assess Image Quality**:
    * Is the text legible? -> If NO, plan `sharpen` or `super_resolution`.
    * Is the geometry flat? -> If NO, plan `perspective_correct`.
    * Is the target too small? -> If YES, plan `crop`.
3.  **Identify Information Gaps**: Do I need external facts? -> If YES, plan `text_search`.
4.  **Formulate Plan**: Decide the immediate next step.

**CRITICAL: Understanding Layout Parsing Results**
- When layout parsing returns text, **ALWAYS trust and use the layout parsing result** as ground truth.
- Layout parsing output will clearly show "Layout Parsing SUCCESS" if text is detected.
- Look for the "ALL RECOGNIZED TEXT" section - this contains the exact text recognized.
- **DO NOT** claim "layout parsing didn't detect any text" if the layout parsing result shows text blocks.
- If layout parsing returns text, use it directly in your answer - do not rely on visual observation when layout parsing has provided the text.

**CRITICAL: Understanding Image Search Results**
- Image search results are processed by Qwen3-32B to extract only relevant "title" and "source" information.
- The results are filtered to remove irrelevant details - only use what is provided.
- **After image_search, you MUST use text_search** to get detailed information about the identified entities.
- Image search provides initial identification, but text search provides the comprehensive facts needed for your answer.

**CRITICAL: Understanding Text Search Results**
- Text search returns **AI-generated summaries** from multiple webpages, not raw search results.
- Each result includes: Title, URL, and a Summary that is already focused on your query.
- **Trust the summaries** - they are generated by Qwen3-32B and filtered for relevance.
- If multiple passages contain relevant information, synthesize them in your final answer.
- Always cite the URLs when using information from text_search results.

---

### 4. COMMON WORKFLOW RECIPES (Examples)

**Scenario A: The "Unreadable Receipt/Document"**
* *Observation*: "The image is a receipt, but it's blurry and tilted."
* *Action 1*: `<tool_call>{"name": "perspective_correct", "arguments": {"image": "img_1"}}</tool_call>`
* *Action 2*: `<tool_call>{"name": "sharpen", "arguments": {"image": "img_2", "amount": 1.5}}</tool_call>` (on the new corrected image)
* *Action 3*: `<tool_call>{"name": "layout_parsing", "arguments": {"image": "img_3"}}</tool_call>` (on the sharpened image)

**Scenario B: The "Detailed Chart Analysis"**
* *Observation*: "There is a dense chart with a legend in the corner."
* *Action 1*: `<tool_call>{"name": "crop", "arguments": {"image": "img_1", "x": 0, "y": 0, "width": 200, "height": 100}}</tool_call>` (focus on the legend, creates img_2)
* *Action 2*: `<tool_call>{"name": "layout_parsing", "arguments": {"image": "img_2"}}</tool_call>` (read the legend text from the cropped image)
* *Action 3*: `<tool_call>{"name": "crop", "arguments": {"image": "img_1", "x": 200, "y": 100, "width": 400, "height": 300}}</tool_call>` (focus on the data bars, creates img_3)

**Scenario C: The "Entity Identification"**
* *Observation*: "I see a landmark but don't know its history."
* *Action 1*: `<tool_call>{"name": "image_search", "arguments": {"url": "img_1"}}</tool_call>` (to analyze the image and identify the name)
* *Action 2*: `<tool_call>{"name": "text_search", "arguments": {"q": "landmark name history", "hl": "en", "top_k": 5}}</tool_call>` (to get AI-summarized historical facts from top webpages using the name found)
* **MANDATORY**: After every `image_search`, you **MUST** call `text_search` with a query based on the identified entity/object to get comprehensive information.

---

### 5. OUTPUT RULES

1.  **Single Action Per Turn**: Output only ONE `<tool_call>` per turn. Wait for the result before proceeding.
2.  **Think First**: Never output a `<tool_call>` without a preceding `<think>` block (or `<think>` tag).
3.  **Tool Call Format**: Always use `<tool_call>` XML tag with JSON format: `<tool_call>{"name": "tool_name", "arguments": {...}}</tool_call>`
4.  **Image References**: Start with `img_1`. Results from tools become `img_2`, `img_3`, etc. Always operate on the *latest* best version of the image.
5.  **Final Answer**: When you have sufficient info, output `<response>...
...</response>`.
    * **Visual Aids**: In your final response, if a diagram would help explain a concept (e.g., scientific process, machine part), insert `

[Image of <query>]
` tags naturally in the text.

---

### 6. EXECUTION FORMATS

**Case: Tool Use (Example)**
<think>
The user asks for the total on the invoice. The image (img_1) is taken from a side angle (skewed). Direct layout parsing will likely fail. I must first correct the perspective to make the text horizontal.
</think>
<tool_call>
{"name": "perspective_correct", "arguments": {"image": "img_1"}}
</tool_call>

**Case: Final Response (Example)**
<think>
I have cropped the chart (img_2) and used layout parsing on the values. The trend shows a 50% increase. I can now answer the user. I will also add a diagram to explain the underlying economic concept.
</think>
<response>
Based on the analysis of the chart, the revenue increased by 50%. This aligns with the principle of supply and demand.

[Image of supply and demand curve]

boxed{50%}
</response>
"""  # noqa: E501, W291

#: ``tools.get_tools_definition()``'s tool list (the prompt holds ``json.dumps(TOOLS, indent=2, ensure_ascii=False)``)
TOOLS: list[JSONObject] = [
    {
        "type": "function",
        "function": {
            "name": "crop",
            "description": "Crop a specific region from an image. The target (text/object) should cover < 30% of the image, or multiple distinct sections need analysis. This drastically improves OCR and recognition accuracy by removing noise.",
            "parameters": {
                "type": "object",
                "properties": {
                    "image": {"type": "string", "description": "Image reference (e.g., 'img_1', 'img_2')."},
                    "x": {"type": "integer", "description": "Top-left X."},
                    "y": {"type": "integer", "description": "Top-left Y."},
                    "width": {"type": "integer", "description": "Crop width."},
                    "height": {"type": "integer", "description": "Crop height."},
                },
                "required": ["image", "x", "y", "width", "height"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "layout_parsing",
            "description": "Perform advanced document layout parsing on an image to extract structured text. Prefer the 'image' parameter with an image reference; the system handles file path operations in the background.",
            "parameters": {
                "type": "object",
                "properties": {
                    "image": {
                        "type": "string",
                        "description": "Image reference such as 'img_1'. Preferred over file_path.",
                    },
                    "file_path": {"type": "string", "description": "Absolute path to a local image file (optional)."},
                    "use_chart_recognition": {"type": "boolean", "default": False},
                    "use_doc_orientation_classify": {"type": "boolean", "default": False},
                },
                "required": [],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "web_search",
            "description": "Perform a web search query to retrieve up-to-date information. Implemented as Serper + Jina + Qwen summarization (same backbone as text_search).",
            "parameters": {
                "type": "object",
                "properties": {"q": {"type": "string"}, "hl": {"type": "string", "default": "en"}},
                "required": ["q"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "image_search",
            "description": "Visually identify the contents of an image. Returns summarized title/source pairs filtered by Qwen3-32B.",
            "parameters": {
                "type": "object",
                "properties": {
                    "url": {"type": "string", "description": "Image reference (e.g., 'img_1') or a direct image URL."}
                },
                "required": ["url"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "text_search",
            "description": "Search for text documents using Serper + Jina + Qwen summarization. Use for entity / fact lookups.",
            "parameters": {
                "type": "object",
                "properties": {
                    "q": {"type": "string"},
                    "query": {"type": "string", "description": "Alias for 'q'."},
                    "hl": {"type": "string", "default": "en"},
                    "lang": {"type": "string", "description": "Alias for 'hl'.", "default": "en"},
                    "top_k": {"type": "integer", "default": 5},
                },
                "required": [],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "perspective_correct",
            "description": "Correct perspective distortion in an image.",
            "parameters": {"type": "object", "properties": {"image": {"type": "string"}}, "required": ["image"]},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "super_resolution",
            "description": "Super-resolve a low-resolution image.",
            "parameters": {
                "type": "object",
                "properties": {"image": {"type": "string"}, "scale": {"type": "integer", "default": 4}},
                "required": ["image"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "sharpen",
            "description": "Sharpen an image to reduce blur.",
            "parameters": {
                "type": "object",
                "properties": {"image": {"type": "string"}, "amount": {"type": "number", "default": 1.5}},
                "required": ["image"],
            },
        },
    },
]

#: ``config.MAX_TURNS`` (``AGENT_MAX_TURNS``, default 50)
MAX_TURNS = 50
#: the release's InferenceConfig / run_infer.py defaults: temperature 0 (greedy), 32768 new tokens
COMPLETION_KWARGS: JSONObject = {"temperature": 0.0, "max_tokens": 32768}
DEFAULTS = AgentDefaults(completion_kwargs=COMPLETION_KWARGS, image_format="PNG", join_text=False)
OBSERVATION = "<observation>\n{}\n</observation>"
#: ``execute_tool``'s names -> the tool that runs
TOOL_OF = {
    "text_search": "text_search",
    "local_search": "text_search",
    "web_search": "web_search",
    "image_search": "image_search",
    "local_image_search": "image_search",
    "lens_scan": "image_search",
    "crop": "crop",
    "layout_parsing": "layout_parsing",
    "perspective_correct": "perspective_correct",
    "super_resolution": "super_resolution",
    "sharpen": "sharpen",
}
#: the RL rollout's two further tools, offered with ``tool_set="all"`` (not in the released inference schema)
EXTRA_TOOLS: list[JSONObject] = [
    {
        "type": "function",
        "function": {
            "name": "visit",
            "description": "Visit webpage(s) and return the summary of the content.",
            "parameters": {
                "type": "object",
                "properties": {
                    "url": {
                        "type": ["string", "array"],
                        "items": {"type": "string"},
                        "minItems": 1,
                        "description": "The URL(s) of the webpage(s) to visit. Can be a single URL or an array of URLs.",
                    },
                    "goal": {"type": "string", "description": "The goal of the visit for webpage(s)."},
                },
                "required": ["url", "goal"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "python_interpreter",
            "description": "Execute Python code in a sandboxed environment. Use this to run Python code and get the "
            "execution results.\n**Make sure to use print() for any output you want to see in the results.**",
            "parameters": {
                "type": "object",
                "properties": {"code": {"type": "string", "description": "The Python code to execute."}},
                "required": ["code"],
            },
        },
    },
]
EXTRA_TOOL_OF = {"visit": "visit", "python_interpreter": "python_interpreter"}


def tools_definition(tool_set: str = "release") -> str:
    """``get_tools_definition()``: the tool list as ``json.dumps(..., indent=2, ensure_ascii=False)``."""
    tools = TOOLS + (EXTRA_TOOLS if tool_set == "all" else [])
    return json.dumps(tools, indent=2, ensure_ascii=False)


# ---------------------------------------------------------------------------------------------- parsing
TOOL_CALL = (("<tool_call>",), ("</tool_call>",))
#: ``_FALLBACK_TAGS`` in its order: (opening tags, closing tags, canonical name); either side may be any of its tags
FALLBACK_TAGS: tuple[tuple[tuple[str, ...], tuple[str, ...], str], ...] = (
    (("<web_search>",), ("</web_search>",), "web_search"),
    (
        ("<image_search>", "<local_image_search>", "<lens_scan>"),
        ("</image_search>", "</local_image_search>", "</lens_scan>"),
        "image_search",
    ),
    (("<text_search>", "<local_search>"), ("</text_search>", "</local_search>"), "text_search"),
    (("<crop>",), ("</crop>",), "crop"),
    (("<layout_parsing>", "<ocr>"), ("</layout_parsing>", "</ocr>"), "layout_parsing"),
    (("<perspective_correct>",), ("</perspective_correct>",), "perspective_correct"),
    (("<super_resolution>",), ("</super_resolution>",), "super_resolution"),
    (("<sharpen>",), ("</sharpen>",), "sharpen"),
)


def _occurrences(text: str, tags: tuple[str, ...]) -> list[tuple[int, str]]:
    out = []
    for tag in tags:
        i = text.find(tag)
        while i != -1:
            out.append((i, tag))
            i = text.find(tag, i + 1)
    return sorted(out)


def tagged_json(text: str, opens: tuple[str, ...], closes: tuple[str, ...]) -> str | None:
    """What ``re.search(r"<open>\\s*(\\{.*?\\})\\s*</close>", text, re.DOTALL).group(1)`` is, in O(n log n):
    the earliest opening tag followed (after whitespace) by ``{``, and the nearest closing tag after it whose
    preceding non-space character is a ``}`` past that ``{``."""
    ends: list[int] = []  # index of the "}" before each closing tag (only space between)
    for i, _tag in _occurrences(text, closes):
        j = i - 1
        while j >= 0 and text[j].isspace():
            j -= 1
        if j >= 0 and text[j] == "}":
            ends.append(j)
    if not ends:
        return None
    ends = sorted(set(ends))
    for i, tag in _occurrences(text, opens):
        b = i + len(tag)
        while b < len(text) and text[b].isspace():
            b += 1
        if b < len(text) and text[b] == "{":
            k = bisect.bisect_right(ends, b)
            if k < len(ends):
                return text[b : ends[k] + 1]
    return None


def normalize_search_aliases(name: Any, params: dict) -> dict:
    """``_normalize_search_aliases``: ``query``/``lang`` become ``q``/``hl`` for the search tools."""
    if name in {"text_search", "local_search", "web_search"}:
        if "query" in params and "q" not in params:
            params["q"] = params.pop("query")
        if "lang" in params and "hl" not in params:
            params["hl"] = params.pop("lang")
    return params


@dataclass(frozen=True)
class ToolCallRequest:
    """A parsed call: the name as the model wrote it and its parameters."""

    name: Any
    parameters: JSONObject


def extract_tool_call(text: str) -> ToolCallRequest | None:
    """``extract_tool_call``: the first ``<tool_call>`` JSON with a name (``arguments``, else ``parameters``), else
    the first fallback tag's JSON (a non-object is ``{"value": ...}``; unparsable text is ``{"q": text}`` for the
    search tags, ``{"url": text}`` for the others); None when there is none. JSON is read with the bounds of
    :func:`insight_o3.base.untrusted.loads` (no NaN, no 5000-digit integers, bounded depth)."""
    raw = tagged_json(text, *TOOL_CALL)
    if raw is not None:
        try:
            payload = loads(raw.strip())
            name = payload.get("name", "")
            params = payload.get("arguments", payload.get("parameters", {})) or {}
            params = normalize_search_aliases(name, dict(params))
            if name:
                return ToolCallRequest(name, params)
        except Exception:  # the release's catch-all: not a call, try the fallback tags
            pass
    for opens, closes, canonical in FALLBACK_TAGS:
        found = tagged_json(text, opens, closes)
        if found is None:
            continue
        raw = found.strip()
        try:
            value = loads(raw)
            params = value if isinstance(value, dict) else {"value": value}
        except Exception:
            params = {"q": raw} if canonical in {"text_search", "web_search"} else {"url": raw}
        return ToolCallRequest(canonical, normalize_search_aliases(canonical, dict(params)))
    return None


def has_response_tag(text: str) -> bool:
    """``has_response_tag``: the final response has begun."""
    return "<response>" in text and ("</response>" in text or "boxed{" in text)


# ---------------------------------------------------------------------------------------------- the session
def full_ref(path: str, size: tuple[int, int]) -> ImageRef:
    return ImageRef(path, (0.0, 0.0, float(size[0]), float(size[1])), size)


class OpenSearchVLSession:
    """One episode (see the module docstring). The driver runs each :class:`UseTool` with the tool layer and hands
    the call's record to :meth:`observe`."""

    def __init__(
        self,
        question: str,
        options: str | None,
        image: str,
        size: tuple[int, int],
        tool_set: str = "release",
        max_turns: int = MAX_TURNS,
    ):
        if tool_set not in TOOL_SETS:
            raise ValueError(f"tool_set must be one of {tuple(TOOL_SETS)}, got {tool_set!r}")
        self.tool_set, self.max_turns = tool_set, max_turns
        prompt_text = question if not options else f"{question}\n{options}"
        tools_text = f"<tools>\n{tools_definition(tool_set)}\n</tools>"
        self.messages: list[dict] = [
            message(
                "user", SYSTEM_PROMPT + "\n\n", image_part(full_ref(image, size)), tools_text + "\n\n" + prompt_text
            )
        ]
        self.turns = 0
        self.replies: list[str] = []

    def final_text(self) -> str:
        """``final_response_text``: every non-empty reply, joined by a blank line."""
        return "\n\n".join(r for r in self.replies if r)

    def tool_of(self, name: Any) -> str | None:
        if not isinstance(name, str):
            return None
        if name in TOOL_OF:
            return TOOL_OF[name]
        return EXTRA_TOOL_OF.get(name) if self.tool_set == "all" else None

    def step(self, reply: str, finish_reason: str | None = None) -> Ask | Finish | UseTool:
        self.turns += 1
        self.replies.append(reply)
        self.messages.append(message("assistant", reply))
        if has_response_tag(reply):
            return Finish(self.final_text())
        call = extract_tool_call(reply)
        if call is None:
            return Finish(self.final_text(), "a reply with neither a tool call nor <response>")
        return UseTool(call.name, self.tool_of(call.name), call.parameters)

    def observe(self, text: str, new_images: list[ShownImage], record: Mapping[str, Any] | None = None) -> Ask | Finish:
        """The call's result as the next user message(s): one per image it made (each with the text), or the text."""
        obs = OBSERVATION.format(text)
        extra = {"tool_call": dict(record)} if record is not None else {}
        if new_images:
            for k, img in enumerate(new_images):
                self.messages.append(
                    message("user", obs, image_part(full_ref(img.path, img.size)), **(extra if k == 0 else {}))
                )
        else:
            self.messages.append(message("user", obs, **extra))
        if self.turns >= self.max_turns:
            return Finish(self.final_text(), f"{self.max_turns} turns (the release's MAX_TURNS)")
        return Ask()

    def answer(self) -> str:
        return self.final_text()


def replies_of(messages: list[dict]) -> list[str]:
    return [message_text(m) for m in messages if m.get("role") == "assistant"]


#: built over the run's toolkit by the registry (the tools' images and retrieval record go into the run directory)
SPEC = AgentSpec(
    name=OPENSEARCH_VL.name,
    protocol_version=PROTOCOL_VERSION,
    description=OPENSEARCH_VL.description,
    image_format=DEFAULTS.image_format,
    keeps_originals=True,
    resizes=False,
)
