"""Make PyPI's torchvision wheel importable next to a CPU-only torch.

PyPI's torchvision 0.28.0 is built against CUDA: its ``_C.so`` cannot be loaded by the CPU
torch, and torchvision's meta registrations then fail with "operator torchvision::nms does
not exist". Declaring the two operator schemas before torchvision is first imported lets its
pure-Python parts (transforms, which transformers and qwen-vl-utils need) import; the C++ ops
themselves stay unavailable. Installed through a ``.pth`` file so it also applies to server
subprocesses; it costs nothing until something imports torchvision.
"""

import sys


class _DeclareTorchvisionOps:
    def find_spec(self, name, path=None, target=None):
        if name != "torchvision":
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        try:
            import importlib.util
            import os

            import torch

            spec = importlib.util.find_spec("torchvision")
            try:
                torch.ops.load_library(os.path.join(os.path.dirname(spec.origin), "_C.so"))
                return None  # a working native build: nothing to do
            except (OSError, ImportError, RuntimeError):
                pass
            lib = torch.library.Library("torchvision", "FRAGMENT")
            for op in ("nms", "qnms"):
                lib.define(f"{op}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
            _KEEP.append(lib)
        except Exception as exc:  # never break interpreter start-up
            print(f"tv_cpu_shim_hook: {exc!r}", file=sys.stderr)
        return None


_KEEP: list = []
sys.meta_path.insert(0, _DeclareTorchvisionOps())
