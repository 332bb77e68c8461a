"""The O3-Bench construction prompts of Appendix E (protocol constants).

* :data:`EXTRACTION_PROMPT` (E.1): information extraction, the same prompt for every layout crop and for the full
  image (Qwen2.5-VL-32B in the paper). It is sent as the system message; the user message is the image alone
  (see ``docs/fidelity.md``, "O3-Bench construction").
* :data:`CHART_SYNTHESIS_PROMPT` / :data:`MAP_SYNTHESIS_PROMPT` (E.2): question synthesis by a text-only model
  (GPT-5 in the paper), chosen by image type. They are ``str.format`` templates (``{GLOBAL_OCR}``,
  ``{GLOBAL_CAPTION}``, ``{LAYOUTS}``; the JSON example's braces are doubled, as the paper prints them), filled
  by :func:`synthesis_prompt`; the model receives the filled text as one user message, never the image.

No code of the authors builds O3-Bench, so the text is the paper's (arXiv 2512.18745, Appendix E.1/E.2) with only
its rendering damage repaired: backticks rendered as left quotes (and opening backticks the rendering dropped),
apostrophes it dropped, and a straight double quote it turned into two backticks. Every repair is listed in
``docs/fidelity.md``; ``tests/o3bench/test_prompts.py`` rebuilds each constant from the paper's text and the
repair list and pins its sha256. What the rendering lost for good (blank lines, the character between "mutually
exclusive" and "no meta-options") is not guessed.
"""

from __future__ import annotations

import hashlib
import re
import string
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ..base.json_types import JSONObject
from .records import BuildFileError, read_text_file

#: E.1, information extraction (system message; the image is the user message).
EXTRACTION_PROMPT = (
    "### System\n"
    "You are acting as a **precise visual information extractor**.\n"
    "Given ONE image, you must (1) identify the image type, (2) write a **comprehensive, strictly factual** caption, and (3) extract **complete OCR text** when present (with special handling for tables).\n"
    "Follow the rules **exactly** and return the output in the three sections shown under **Output Format**.\n"
    "---\n"
    "### Global Principles\n"
    "1) **No hallucinations.** Describe only what is visible. If something is unclear, write `[illegible]` or `[partially obscured: ...]`.\n"
    "2) **Be exhaustive.** Do not omit small text, legends, tick labels, footnotes, watermarks, axis titles, subtitles, panel labels (e.g., `(a)`, `(b)`), or figure notes.\n"
    "3) **Preserve fidelity.** Copy punctuation, capitalization, diacritics, signs (`+`, `-`), units, and spacing **exactly**. Do not normalize numbers or rewrite text.\n"
    "4) **Reading order.** When listing text outside of tables, use **top-to-bottom, left-to-right** order.\n"
    "5) **Language.** OCR text must remain in the **original language(s)**. The caption should be in English unless the visible UI/page language is clearly not English; in that case, keep captions in that language. Do **not** translate OCR unless the image itself contains a translation.\n"
    "6) **No extra sections.** Output **only** the three required sections and nothing else.\n"
    "---\n"
    "### Image Type Identification (Section 1)\n"
    "- Classify the image using one or more of the following types (multiple allowed if appropriate):\n"
    "`chart`, `table`, `document/text page`, `diagram/flowchart`, `map`, `UI/screenshot`, `form`, `invoice/receipt`, `poster/flyer`, `scientific figure (multi-panel)`, `natural scene`, `legend`, `infographic`, `other (specify)`.\n"
    "---\n"
    "### Detailed Caption (Section 2)\n"
    "Write a **dense, structured** caption that covers all critical elements. Use clear, objective language and organize logically (left->right, top->bottom; or foreground->background). Include the relevant sub-guidelines:\n"
    "**A. Charts / Plots / Scientific Figures**\n"
    "- State the figure title (if present), chart type(s), axes titles, **units**, tick labels, gridlines, data series, markers/line styles, **legend and color/shape mappings**, annotations, error bars, trend lines, and notable extrema/patterns (peaks, troughs, monotonic trends, outliers).\n"
    "- If multi-panel: identify panel labels `(a)`, `(b)`, ... and summarize each panel in order.\n"
    "- Mention any insets, callouts, footnotes, or sources.\n"
    "**B. Tables / Forms / Receipts / Documents**\n"
    "- Summarize what the table/document contains (topics/fields), approximate dimensions (e.g., `~12 rows x 6 columns`), header rows, merged cells, checkboxes, stamps, signatures, page numbers, and footers/footnotes.\n"
    "- Call out key sections (headings, lists, paragraphs), logos, and seals.\n"
    "**C. Maps**\n"
    "- Report title, compass/north arrow, scale/scale bar, coordinate grid or lat/long, boundaries, regions, routes/lines with **color-to-meaning mapping** (from legend), symbols/icons (e.g., hospitals, stations), labels for places/roads, insets, and any zoning/heat color ramp.\n"
    "- Include legend content (categories and their visual encodings).\n"
    "**D. UI / Screenshots**\n"
    "- App/site name, window title, menus/toolbars, visible controls (buttons, toggles, checkboxes, dropdowns, search fields), selected/disabled states, scroll position, timestamps, status bars, notifications, dialogs, visible file paths, and version strings.\n"
    "**E. Natural / Real-World Scenes**\n"
    "- Enumerate salient objects, text on signs/labels, relative positions (e.g., \"a red sign above the doorway\"), counts for repeated items, conditions (day/night, indoor/outdoor), and visible brands/logos.\n"
    "> Do **not** invent interpretations or causal explanations. Keep to what is visually supported.\n"
    "---\n"
    "### OCR Extraction (Section 3)\n"
    "Extract **all visible text**. Follow these rules:\n"
    "**General OCR Rules**\n"
    "- Use **natural reading order** (top->bottom, left->right).\n"
    "- Preserve original line breaks and spacing.\n"
    "- If text is repeated (e.g., in a watermark), list it once and note `(repeats)` if necessary.\n"
    "- If a character/word is uncertain, write it as `[illegible]` or `[?]` without guessing.\n"
    "**Tables (very important)**\n"
    "- When an area is a table, extract it immediately using **Markdown table syntax**.\n"
    "- Preserve the **exact** row/column structure and header rows; if a cell has line breaks, use `<br>` or `\\n`.\n"
    "- For merged cells, repeat the visible text in each affected cell and note `(merged)` once after the table.\n"
    "- If multiple tables exist, label them sequentially as `Table 1`, `Table 2`, ... in the order they appear.\n"
    "**Documents / Text Pages / Forms**\n"
    "- Extract headings, paragraphs, lists, captions, footnotes, headers/footers exactly as shown. Maintain indentation and list markers.\n"
    "**Charts / Maps / Diagrams / UI / Natural Scenes**\n"
    "- Extract **all textual elements** present: titles, subtitles, axis labels, tick labels, legend entries, series labels, annotations, callouts, map labels (places/roads/lines), UI labels (menu items, buttons, tooltips), signs, badges, and watermarks.\n"
    "If **no text** is present, write `None`.\n"
    "---\n"
    "### Output Format (return EXACTLY this Markdown structure; no code fences)\n"
    "## Image Identification\n"
    "<one or more types from the allowed list; add brief justification if mixed>\n"
    "## Detailed Caption\n"
    "<dense, strictly factual caption covering all visible elements per rules above>\n"
    "## Extracted OCR (if any)\n"
    "<EITHER: full Markdown tables + remaining text in reading order; OR: all non-table text in reading order; write \"None\" if no text>"
)


#: E.2, question synthesis for chart images (a ``str.format`` template).
CHART_SYNTHESIS_PROMPT = (
    "You are an expert assessment-item author who designs rigorous **multi-hop visual-reasoning** questions to benchmark \"think-with-images\" abilities on **dense diagrams, charts, tables, and schematics**. The goal is to generate items so challenging that today's strongest MLLMs score **<= 50%** without external tools.\n"
    "You will receive:\n"
    "### INPUTS\n"
    "1. **GLOBAL_OCR** - OCR or caption text describing the entire image/page.\n"
    "{GLOBAL_OCR}\n"
    "2. **GLOBAL_CAPTION** - caption text describing the entire image/page.\n"
    "{GLOBAL_CAPTION}\n"
    "3. **LAYOUTS** - a list of cropped regions. Each layout contains:\n"
    "- layout_id - unique numeric ID (for your internal reference only).\n"
    "- caption_or_ocr - OCR or descriptive caption of the cropped region.\n"
    "{LAYOUTS}\n"
    "> **Important constraint:**\n"
    "> In the **question** and **options**, you must use only natural labels/text present in the GLOBAL_OCR or GLOBAL_CAPTION or `caption_or_ocr`.\n"
    "> **Never** mention `layout_id`, `region`, `crop`, `panel`, `box`, or any similar tokens. Layouts are **reference-only** to help you construct questions; they may be cited in the **explanation** but not in the question or options.\n"
    "---\n"
    "## TASK\n"
    "Create **3-5 independent multiple-choice questions** that each requires **>=2 distinct visual hops** across layouts or global text. These must be **multi-step items directly**, not derived from single-step seeds. All facts must be grounded in the provided OCR/captions only.\n"
    "---\n"
    "## QUESTION-DESIGN RULES\n"
    "1. **Multi-hop inference (required)**\n"
    "Each question must integrate information from at least **two different layouts** or from global + local text. Valid patterns include:\n"
    "- Cross-table lookup & join (match category in Layout A to code/key in Layout B, then filter by condition).\n"
    "- Table <-> chart alignment (map series/labels from one layout to another).\n"
    "- Diagram <-> table mapping (use schematic labels to query corresponding rows/values).\n"
    "- Temporal alignment (identify when a threshold is crossed in one chart, then fetch related info from another).\n"
    "- Proportions/ratios/ranks (compute shares from one region and compare with targets in another).\n"
    "- Exceptions/constraints (apply footnote conditions from one layout before interpreting values elsewhere).\n"
    "2. **Analytical realism**\n"
    "Situate each question in a plausible scenario (finance, science, education, operations, product metrics, etc.) while remaining strictly grounded in the provided OCR/captions.\n"
    "3. **Difficulty control**\n"
    "Questions should require careful scanning, cross-referencing, and light calculations (differences, ratios, ranking). Avoid items that can be answered at a glance.\n"
    "4. **Units, scales, rounding**\n"
    "Always follow the units/scales given in the OCR. If rounding is necessary, state the rounding rule in the **explanation**.\n"
    "5. **Ambiguity guardrails**\n"
    "Ensure exactly **one correct choice** among A-E, unless F (\"No right choice\") is correct. Adjust conditions to avoid ties.\n"
    "6. **Label fidelity**\n"
    "Copy text exactly as provided (case, spelling, diacritics). Never use external/world knowledge.\n"
    "---\n"
    "## ANSWER-OPTION RULES\n"
    "1. Provide **exactly six** options, one per line, labeled `A.` ... `F.`\n"
    "2. `F.` must always be exactly `No right choice`.\n"
    "3. Place the correct answer randomly among `A.`-`E.`; <=10% of items may have F as the correct answer.\n"
    "4. Distractors must be plausible and drawn from actual text/numbers in the OCR/captions.\n"
    "5. Make options mutually exclusive no meta-options like \"All of the above\".\n"
    "---\n"
    "## EXPLANATION RULES\n"
    "- Provide a **step-by-step chain**: `Step 1: ...`, `Step 2: ...`, etc.\n"
    "- Explicitly cite which layouts were used as `[layout X]`.\n"
    "- Show all computations (e.g., \"(132 - 95) / 95 = 0.389 = 38.9% [layout 4]\").\n"
    "---\n"
    "## OUTPUT FORMAT\n"
    "Return **only** the following JSON array - no extra text, no markdown outside the code block, no commentary:\n"
    "```json\n"
    "[\n"
    "{{\n"
    "\"question\": \"...\",\n"
    "\"options\": \"A. ...\\nB. ...\\nC. ...\\nD. ...\\nE. ...\\nF. No right choice\",\n"
    "\"answer\": \"C\",\n"
    "\"explanation\": \"Step 1: ... [layout 2]\\nStep 2: ... [layout 5]\\nStep 3: ...\"\n"
    "}},\n"
    "...\n"
    "]\n"
    "```"
)


#: E.2, question synthesis for map images (a ``str.format`` template).
MAP_SYNTHESIS_PROMPT = (
    "You are an expert evaluation-item author who designs rigorous **multi-hop visual-reasoning** questions to benchmark \"think-with-images\" abilities on **maps** (bus/metro networks, terminals, malls, festivals, parks, etc.). Items should be challenging enough that today's strongest MLLMs achieve **<= 50%** accuracy.\n"
    "You will receive:\n"
    "### INPUTS\n"
    "1. **GLOBAL_OCR** - OCR or caption text describing the entire map.\n"
    "{GLOBAL_OCR}\n"
    "2. **GLOBAL_CAPTION** - caption text describing the entire map.\n"
    "{GLOBAL_CAPTION}\n"
    "3. **LAYOUTS** - a list of cropped map regions. Each layout contains:\n"
    "- layout_id - unique numeric ID (for your internal reference only).\n"
    "- caption_or_ocr - OCR or descriptive caption of the cropped region.\n"
    "{LAYOUTS}\n"
    "> **Hard requirement:** In the **question** and **options**, you must use only natural labels/text found in GLOBAL_OCR or GLOBAL_CAPTION or `caption_or_ocr`.\n"
    "> Do **not** mention `layout_id`, `region`, `crop`, `box`, `panel`, or similar. Layouts are **reference-only** for your reasoning; you may cite them in the **explanation**, but never in the question or options.\n"
    "---\n"
    "## TASK\n"
    "Generate **3-5 independent multiple-choice questions**.\n"
    "Each question must require **>=2 distinct reasoning hops** that combine information across different layouts or between global and local OCR. All facts must be image-grounded.\n"
    "---\n"
    "## 1) QUESTION-DESIGN RULES\n"
    "1. **Multi-hop reasoning (mandatory).** Examples of valid hops:\n"
    "- Legend <-> line color <-> stop/zone.\n"
    "- Grid index <-> label <-> adjacency.\n"
    "- Level/floor marker <-> facility <-> inset.\n"
    "- Route <-> timetable <-> destination.\n"
    "- Symbol <-> restriction <-> path feasibility.\n"
    "- Distance/scale <-> number of segments <-> travel time.\n"
    "2. **Image/OCR grounded only.** Do not use external/world knowledge.\n"
    "3. **Diversity.** Vary question styles (routing, conditional reachability, transfer logic, adjacency/containment, count/compare, scale-based).\n"
    "4. **Difficulty target.** Avoid \"at-a-glance\" items. Require cross-checking, counting, or lightweight calculation.\n"
    "5. **Label fidelity.** Copy map labels exactly (case, spelling, diacritics).\n"
    "6. **Uniqueness.** Ensure exactly **one correct answer** among A-E, unless F (\"No right choice\") is deliberately correct.\n"
    "7. **Units & scale.** If computing length/time/segments, use the map's own scales, symbols, or counts.\n"
    "---\n"
    "## 2) ANSWER-OPTION RULES\n"
    "1. Provide **exactly six** options labeled `A.` ... `F.`.\n"
    "2. `F.` must always be `No right choice`.\n"
    "3. Normally, the correct answer is among A-E; only rarely (<10%) should F be correct.\n"
    "4. Distractors must be plausible, drawn from real map text/numbers, and mutually exclusive.\n"
    "5. No meta-options (\"All of the above\").\n"
    "---\n"
    "## 3) EXPLANATION RULES\n"
    "- Provide a **step-by-step reasoning chain**.\n"
    "- Explicitly cite layouts used as `[layout X]`.\n"
    "- Make hops and computations explicit (e.g., \"Count 5 stops along Red Line [layout 3] and compare to 4 stops in Zone B [layout 5]\").\n"
    "---\n"
    "## 4) OUTPUT FORMAT\n"
    "Return **only** the following JSON array-no extra commentary or markdown:\n"
    "```json\n"
    "[\n"
    "{{\n"
    "\"question\": \"...\",\n"
    "\"options\": \"A. ...\\nB. ...\\nC. ...\\nD. ...\\nE. ...\\nF. No right choice\",\n"
    "\"answer\": \"B\",\n"
    "\"explanation\": \"Step 1: ... [layout 1]\\nStep 2: ... [layout 4]\\nStep 3: ...\"\n"
    "}},\n"
    "...\n"
    "]\n"
    "```"
)


#: The synthesis prompt of each image type (``subset``) the package ships.
SYNTHESIS_PROMPTS = {"chart": CHART_SYNTHESIS_PROMPT, "map": MAP_SYNTHESIS_PROMPT}
SUBSETS = tuple(SYNTHESIS_PROMPTS)
#: The placeholders an E.2 template fills (``str.format`` fields).
SYNTHESIS_FIELDS = ("GLOBAL_OCR", "GLOBAL_CAPTION", "LAYOUTS")
#: What an E.2 prompt's {LAYOUTS} holds of each layout crop's E.1 sections (caption and OCR, or one of them).
LAYOUT_TEXT_MODES = ("both", "ocr", "caption")
#: The section titles of the E.1 output format that every extraction reply is parsed into.
EXTRACTION_SECTIONS = ("Image Identification", "Detailed Caption", "Extracted OCR")
_CATEGORY = re.compile(r"^[a-z][a-z0-9_]*$")


def synthesis_prompt(
    subset: str, global_ocr: str, global_caption: str, layouts: str, templates: Mapping[str, str] | None = None
) -> str:
    """The E.2 prompt of ``subset`` (its template in ``templates``, default the shipped chart and map ones) with its
    three inputs filled in. ``str.format`` does not look inside the substituted values, so braces in OCR text reach
    the model unchanged."""
    templates = SYNTHESIS_PROMPTS if templates is None else templates
    try:
        template = templates[subset]
    except KeyError:
        known = ", ".join(templates)
        raise ValueError(f"no synthesis prompt for image type {subset!r} (known: {known})") from None
    return template.format(GLOBAL_OCR=global_ocr, GLOBAL_CAPTION=global_caption, LAYOUTS=layouts)


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def prompt_hashes() -> dict[str, str]:
    """sha256 (full hex digest) of each construction prompt the package ships, for the run card."""
    named = {"EXTRACTION_PROMPT": EXTRACTION_PROMPT}
    named |= {synthesis_prompt_name(c): t for c, t in SYNTHESIS_PROMPTS.items()}
    return {name: sha256_text(text) for name, text in named.items()}


# ----------------------------------------------------------------------------- categories and prompts of one's own
def check_category(name: str, where: str) -> str:
    """``name`` if it can name a category (lower-case letters, digits, ``_``; it is part of image keys and of the
    release's directory names); else :class:`BuildFileError`."""
    if not _CATEGORY.match(name):
        raise BuildFileError(
            f"{where}: category {name!r} must be lower-case letters, digits and '_', starting with a letter "
            f"(e.g. floor_plan)"
        )
    return name


def synthesis_prompt_name(category: str) -> str:
    """The name of a category's E.2 prompt in the cards: ``CHART_SYNTHESIS_PROMPT``, ``FLOOR_PLAN_SYNTHESIS_PROMPT``."""
    return f"{category.upper()}_SYNTHESIS_PROMPT"


@dataclass(frozen=True)
class PromptFile:
    """A prompt of one's own: the file's text exactly (UTF-8), recorded in the step card by path and sha256."""

    path: str
    text: str

    def card(self) -> JSONObject:
        return {"file": self.path, "sha256": sha256_text(self.text)}


def read_prompt_file(path: str, flag: str) -> PromptFile:
    """The text of a prompt file (every byte of it: no newline is stripped); :class:`BuildFileError` naming the flag
    and the file when it cannot be read or is empty."""
    text, _ = read_text_file(path, flag)
    if not text.strip():
        raise BuildFileError(f"{flag} {path}: the prompt file is empty")
    return PromptFile(str(Path(path).resolve()), text)


def extraction_prompt_file(path: str) -> PromptFile:
    """An E.1 prompt of one's own (``--extract_prompt``): it must ask for the three sections the replies are
    parsed into (their titles appear in it, in any case)."""
    pf = read_prompt_file(path, "extract_prompt")
    missing = [t for t in EXTRACTION_SECTIONS if t.lower() not in pf.text.lower()]
    if missing:
        raise BuildFileError(
            f"extract_prompt {path}: the prompt does not ask for the section(s) {', '.join(map(repr, missing))}: "
            f"every reply is parsed into the sections '## Image Identification', '## Detailed Caption', "
            f"'## Extracted OCR (if any)' (E.1's output format), so ask for them"
        )
    return pf


def template_problem(text: str) -> str | None:
    """What makes ``text`` unusable as an E.2 template (None: nothing). A placeholder is a bare name: a format spec
    or conversion (``{LAYOUTS:>30000000}``, ``{LAYOUTS:{GLOBAL_OCR}}``, ``{LAYOUTS!r}``) is refused, since it would
    crash at the first image, pad the prompt without bound, or let the extracted text choose how it is formatted."""
    try:
        fields = [(name, spec, conv) for _, name, spec, conv in string.Formatter().parse(text) if name is not None]
    except ValueError as e:
        return f"not a str.format template ({e}): write a literal brace as '{{{{' or '}}}}', as the shipped prompts do"
    names = [name for name, _, _ in fields]
    unknown = [n for n in names if n not in SYNTHESIS_FIELDS]
    if unknown:
        return (
            f"unknown placeholder {{{unknown[0]}}}: a template fills {{GLOBAL_OCR}}, {{GLOBAL_CAPTION}} and "
            f"{{LAYOUTS}}; write a literal brace as '{{{{' or '}}}}'"
        )
    for name, spec, conv in fields:
        if spec or conv:
            shown = "{" + name + (f"!{conv}" if conv else "") + (f":{spec}" if spec else "") + "}"
            return (
                f"placeholder {shown} has a format spec or conversion: write {{{name}}} alone "
                f"(a literal brace is '{{{{' or '}}}}')"
            )
    if "LAYOUTS" not in names:
        return "no {LAYOUTS} placeholder: the model must see the layouts to cite them"
    return None


def synthesis_templates(specs: list[str] | None) -> tuple[dict[str, str], dict[str, JSONObject]]:
    """The E.2 template of each category: the shipped chart and map ones, replaced or joined by ``specs``
    (``--synth_prompt CATEGORY=FILE``, repeatable); and the files' cards by prompt name."""
    templates, files = dict(SYNTHESIS_PROMPTS), {}
    seen: set[str] = set()
    for spec in specs or []:
        category, sep, path = spec.partition("=")
        if not sep or not path:
            raise BuildFileError(f"synth_prompt {spec!r}: expected CATEGORY=FILE (e.g. floor_plan=floor_plan.txt)")
        category = check_category(category.strip(), "synth_prompt")
        if category in seen:
            raise BuildFileError(f"synth_prompt: category {category!r} is given twice")
        seen.add(category)
        pf = read_prompt_file(path, f"synth_prompt {category}=")
        problem = template_problem(pf.text)
        if problem is not None:
            raise BuildFileError(f"synth_prompt {category}={path}: {problem}")
        templates[category] = pf.text
        files[synthesis_prompt_name(category)] = pf.card()
    return templates, files
