"""Boxes and images: geometry on boxes and Qwen's resize rule (:mod:`.geometry`), decoding, resizing and
encoding each image once (:mod:`.images`) in worker processes that keep what they decoded (:mod:`.render_pool`), and
the prepared images kept on disk for later runs (:mod:`.prepared_cache`)."""

__all__ = [
    "geometry",
    "images",
    "limits",
    "prepared_cache",
    "render_pool",
    "view_ops",
]
