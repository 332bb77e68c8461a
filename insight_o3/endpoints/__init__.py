"""Talking to OpenAI-compatible endpoints: the endpoint (:mod:`.endpoint`), the guarded client (:mod:`.client`), one
chat request and its first choice (:mod:`.chat`), token usage and prices
(:mod:`.usage`), rate limits (:mod:`.rate_limit`), the per-endpoint failure guard (:mod:`.guard`), the
check before the first item (:mod:`.preflight`), the errors a run records instead of raising
(:mod:`.errors`) and a scripted local endpoint for demos and benchmarks (:mod:`.scripted_server`).
"""

__all__ = [
    "chat",
    "client",
    "defaults",
    "endpoint",
    "errors",
    "guard",
    "preflight",
    "rate_limit",
    "scripted_server",
    "usage",
]
