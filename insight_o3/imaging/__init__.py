"""Boxes and images: geometry on boxes and Qwen's resize rule (:mod:`.geometry`), decoding, resizing and
encoding each image once (:mod:`.images`), and the prepared images kept on disk for later runs
(:mod:`.prepared_cache`)."""

__all__ = [
    "geometry",
    "images",
    "limits",
    "prepared_cache",
    "view_ops",
]
