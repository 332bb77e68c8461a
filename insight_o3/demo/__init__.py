"""The keyless demo: a generated benchmark with known answers and the scripted endpoints that answer it."""

__all__ = [
    "bench",
    "endpoints",
    "opensearch_vl",
]
