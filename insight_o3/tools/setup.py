"""A run's tool settings (:class:`ToolSettings`, frozen, from the command's flags) and the toolkit they make:
which retrieval backend (``local``: a corpus index; ``web``: the released chain at the endpoints the command built;
``replay``: a recorded store, no network), every retrieval answer recorded into the run's store, and what the run
card says about the tools (the OCR engine and its version, OpenCV's version, the super-resolution model or its
fallback)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..base.json_types import JSONObject
from .backend import Retrieval
from .base import ToolLimits
from .choices import LAYOUT_BACKENDS, RETRIEVALS, TOOL_SETS
from .corpus import LocalCorpus
from .layout import tesseract_version
from .store import Recording, Replay, RetrievalStore
from .toolkit import Toolkit
from .visual import SR_MODEL_DEFAULT
from .web import WebChain, WebSettings


class ToolSettingsError(ValueError):
    """Tool settings that cannot make a toolkit (names the setting)."""


@dataclass(frozen=True, kw_only=True)
class ToolSettings:
    tool_set: str = "release"
    retrieval: str = "local"
    corpus: str | None = None  # the local backend's index (insight-o3-index-corpus)
    replay_from: str | None = None  # the replay backend's store (a run's retrieval/ folder, or the run itself)
    layout_backend: str = "tesseract"
    layout_api_url: str | None = None
    sr_model_path: str | None = None
    seconds: float = 120.0  # per tool call
    python_seconds: float = 30.0
    web: WebSettings | None = None  # the web backend's endpoints (WebSettings.from_env, in the command)

    def check(self) -> None:
        if self.tool_set not in TOOL_SETS:
            raise ToolSettingsError(f"tool set {self.tool_set!r}: one of {sorted(TOOL_SETS)}")
        if self.retrieval not in RETRIEVALS:
            raise ToolSettingsError(f"retrieval {self.retrieval!r}: one of {RETRIEVALS}")
        if self.retrieval == "local" and not self.corpus:
            raise ToolSettingsError(
                "the local retrieval backend needs a corpus index (make one with insight-o3-index-corpus)"
            )
        if self.retrieval == "replay" and not self.replay_from:
            raise ToolSettingsError("the replay retrieval backend needs the store to replay (a run directory)")
        if self.layout_backend not in LAYOUT_BACKENDS:
            raise ToolSettingsError(f"layout backend {self.layout_backend!r}: one of {LAYOUT_BACKENDS}")


def replay_store_dir(path: str) -> Path:
    """A store folder from a run directory or the store folder itself."""
    p = Path(path)
    return p / "retrieval" if (p / "retrieval" / "index.jsonl").exists() else p


def retrieval_backend(s: ToolSettings, store_dir: str | None) -> Retrieval | None:
    record_to = RetrievalStore(store_dir) if store_dir else None
    inner: Retrieval
    if s.retrieval == "none":
        return None
    if s.retrieval == "replay":
        assert s.replay_from is not None
        src = replay_store_dir(s.replay_from)
        if not (src / "index.jsonl").exists():
            raise ToolSettingsError(f"{s.replay_from}: no retrieval store there (no retrieval/index.jsonl)")
        return Replay(RetrievalStore(src), record_to if store_dir and Path(store_dir) != src else None)
    if s.retrieval == "local":
        assert s.corpus is not None
        inner = LocalCorpus(s.corpus)
    else:
        if s.web is None:
            raise ToolSettingsError("the web retrieval backend needs its endpoints (WebSettings.from_env)")
        inner = WebChain(s.web)
    return Recording(inner, record_to) if record_to is not None else inner


def build_toolkit(s: ToolSettings, images_dir: str | None = None, store_dir: str | None = None) -> Toolkit:
    s.check()
    settings = {
        "layout_backend": s.layout_backend,
        "layout_api_url": s.layout_api_url or "",
        "sr_model_path": s.sr_model_path or "",
        "python_seconds": s.python_seconds,
    }
    return Toolkit.of(
        TOOL_SETS[s.tool_set],
        images_dir=Path(images_dir) if images_dir else None,
        limits=ToolLimits(seconds=s.seconds),
        retrieval=retrieval_backend(s, store_dir),
        settings=settings,
    )


def opencv_version() -> str | None:
    try:
        import cv2

        return str(cv2.__version__)
    except ImportError:
        return None


def tools_card(s: ToolSettings, toolkit: Toolkit | None = None) -> JSONObject:
    """What the run card says about the tools."""
    sr = s.sr_model_path or os.environ.get("SR_MODEL_PATH", SR_MODEL_DEFAULT)
    return {
        "tool_set": s.tool_set,
        "tools": list(TOOL_SETS[s.tool_set]),
        "retrieval": toolkit.describe()["retrieval"] if toolkit is not None else {"backend": s.retrieval},
        "layout_parsing": (
            {
                "backend": "tesseract",
                "engine": "Tesseract OCR (Debian tesseract-ocr, via pytesseract)",
                "version": tesseract_version(),
            }
            if s.layout_backend == "tesseract"
            else {"backend": "api", "url": s.layout_api_url or os.environ.get("LAYOUT_PARSING_API_URL", "")}
        ),
        "opencv": opencv_version(),
        "super_resolution": {
            "model": sr,
            "model_present": os.path.exists(sr),
            "fallback": None
            if os.path.exists(sr)
            else "no EDSR weights: the image is returned unchanged (the release's fallback)",
        },
        "per_call_seconds": s.seconds,
    }
