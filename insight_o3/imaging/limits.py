"""The decode limits of :mod:`insight_o3.imaging.images` (``--max_decode_values``), in a module that imports nothing,
so that building a command's parser does not load Pillow."""

from __future__ import annotations

__all__ = ["DEFAULT_MAX_DECODE_PIXELS", "DEFAULT_MAX_DECODE_VALUES"]

#: Largest image (in pixels) we agree to decode; bigger files are treated as decompression bombs.
DEFAULT_MAX_DECODE_PIXELS = 16384 * 16384
#: Most values (pixels x channels, see :func:`insight_o3.imaging.images.decode_values`) one image may take to decode
#: (``--max_decode_values``): about 0.8 GB of memory at most. A 16384x16384 RGBA PNG (1.9e9 values) is refused from
#: its header instead of peaking at 2 GB; an RGB image up to 14142x14142 (O3-Bench's average is 4602x3967), RGBA up
#: to 9258x9258 pass.
DEFAULT_MAX_DECODE_VALUES = 600_000_000
