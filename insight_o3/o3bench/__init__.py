"""Build O3-Bench-style benchmarks: the construction pipeline of the paper (§3.2, Appendix B.2, E.1, E.2).

One workspace directory holds every step's files; each step is a subcommand of
``python -m insight_o3.scripts.build_o3_bench`` (console script ``insight-o3-build-o3-bench``):

============  =============================================================================================
step          what it does (module)
============  =============================================================================================
sources       candidate images + their layout boxes from PaddleX/PaddleOCR layout-detector JSON, ``>= N``
              layouts filter (:mod:`.sources`)
extract       E.1 information extraction on every layout crop and on the full image, three sections parsed
              (:mod:`.extraction`; a VLM)
synthesize    E.2 question synthesis from the global OCR/caption and the layouts' text, never the image
              (:mod:`.synthesis`; a text-only model)
validate      deterministic checks, one reason per rejected item; target layouts from the citations; F share
              (:mod:`.validation`)
filter        difficulty filter: items every model (or the rule's number of models) solves are dropped, with
              the evaluation's request and answer checking (:mod:`.filtering`)
review        self-contained HTML review page per batch + a plain decisions file; applying it re-validates
              edits (:mod:`.review`, page in :mod:`insight_o3.viz.review_page`)
release       options A-E shuffled with a fixed seed (F last), ``metadata.jsonl`` + images in O3-Bench's own
              layout, stats and run card (:mod:`.release`)
============  =============================================================================================

The workspace layout is :class:`.workspace.Workspace`.
"""

__all__ = [
    "demo",
    "extraction",
    "filtering",
    "generic",
    "letter_refs",
    "prompts",
    "records",
    "release",
    "review",
    "sources",
    "steps",
    "synthesis",
    "validation",
    "validation_rules",
    "workspace",
]
