"""InSight-o3: O3-Bench evaluation, the vReasoner + vSearcher system, and vSearcher training tools.

Importing this package needs none of torch, verl or vllm.
"""

__version__ = "0.1.0"

__all__ = [
    "agents",
    "analysis",
    "base",
    "data",
    "demo",
    "endpoints",
    "evaluation",
    "imaging",
    "jobs",
    "o3bench",
    "protocol",
    "reasoning_data",
    "scripts",
    "storage",
    "tools",
    "viz",
]
