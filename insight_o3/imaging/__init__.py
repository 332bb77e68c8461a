"""Boxes and images: geometry on boxes and Qwen's resize rule (:mod:`.geometry`), decoding, resizing and
encoding each image once (:mod:`.images`)."""

__all__ = [
    "geometry",
    "images",
]
