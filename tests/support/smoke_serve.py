"""The last check of ``recipe/vsearch/smoke_gpu.sh``: vLLM serves an ``export_hf.sh`` export and answers one request
shaped as the vSearcher's longest: the whole image at its real training size (D.1: ~3.2M pixels, 4096 image tokens)
plus 6 crops, 7 images in one request (the recipe's ``limit_images``).

    python -m tests.support.smoke_serve <export dir> [--python PY] [--port N] [--timeout S]

Exit 0 when the server started and answered with all images in the prompt (more prompt tokens than the whole
image's 4096); the server is stopped either way. ``--plan`` prints the
server command and the request's image sizes without starting anything (what the CPU test checks).
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

#: the whole image (2304 x 1400 = 3,225,600 pixels, smart_resize'd to the 4096-token budget) and 6 crops
IMAGE_SIZES = [(2304, 1400)] + [(896, 672)] * 6
MAX_PIXELS = 4096 * 28 * 28
MAX_MODEL_LEN = 16384


def server_command(python: str, model: str, port: int) -> list[str]:
    return [
        python,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        model,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--max-model-len",
        str(MAX_MODEL_LEN),
        "--limit-mm-per-prompt",
        json.dumps({"image": len(IMAGE_SIZES)}),
        "--mm-processor-kwargs",
        json.dumps({"max_pixels": MAX_PIXELS}),
        "--gpu-memory-utilization",
        "0.3",
        # decode as in training (scripts/vllm_serve_bg.sh: not the export's inherited generation_config.json)
        "--generation-config",
        "vllm",
    ]


def _image_url(size: tuple[int, int], seed: int) -> str:
    from PIL import Image

    img = Image.new("RGB", size, (20 + 40 * seed % 200, 90, 160))
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=90)
    return "data:image/jpeg;base64," + base64.b64encode(buf.getvalue()).decode()


def request_body(model: str) -> dict:
    content: list[dict] = [
        {"type": "image_url", "image_url": {"url": _image_url(s, i)}} for i, s in enumerate(IMAGE_SIZES)
    ]
    content.append({"type": "text", "text": "Locate the blue sign."})
    return {"model": model, "messages": [{"role": "user", "content": content}], "max_tokens": 16, "temperature": 0}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        allow_abbrev=False, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("export")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=240)
    ap.add_argument("--plan", action="store_true")
    args = ap.parse_args(argv)
    port = args.port or _free_port()
    cmd = server_command(args.python, args.export, port)
    if args.plan:
        print(json.dumps({"server": cmd, "images": IMAGE_SIZES, "max_pixels": MAX_PIXELS}))
        return 0
    log = open(os.path.join(args.export, "..", "serve.log"), "w")  # noqa: SIM115 (kept open for the server)
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + args.timeout
        while True:
            if proc.poll() is not None:
                print(f"smoke_serve: the server exited with {proc.returncode} (see serve.log)", file=sys.stderr)
                return 1
            try:
                urllib.request.urlopen(base + "/v1/models", timeout=5).read()
                break
            except OSError:
                if time.monotonic() > deadline:
                    print("smoke_serve: the server did not start in time", file=sys.stderr)
                    return 1
                time.sleep(2)
        req = urllib.request.Request(
            base + "/v1/chat/completions",
            data=json.dumps(request_body(args.export)).encode(),
            headers={"Content-Type": "application/json"},
        )
        reply = json.loads(urllib.request.urlopen(req, timeout=120).read())
        text = reply["choices"][0]["message"]["content"] or ""
        usage = reply.get("usage") or {}
        n = int(usage.get("prompt_tokens") or 0)
        print(f"smoke_serve: {len(IMAGE_SIZES)} images, prompt tokens {n}, reply {text[:60]!r}")
        # the random tiny model may answer anything (even nothing); the check is that all 7 images went in
        return 0 if n > MAX_PIXELS // (28 * 28) else 1
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()


if __name__ == "__main__":
    raise SystemExit(main())
