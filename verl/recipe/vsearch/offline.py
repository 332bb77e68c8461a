"""Starting the recipe on nodes without internet access.

Two things of the pinned GPU stack reach out to the network at start-up:

* the model / tokenizer / processor: use a local ``MODEL_PATH`` and ``HF_HUB_OFFLINE=1`` (forwarded to
  every Ray worker, :data:`recipe.vsearch.main.FORWARDED_ENV_PREFIXES`);
* **openai_harmony's ``o200k_base`` vocab**: verl 0.7.0 loads it at import of its vLLM server module
  when vLLM is 0.12.0, in every process including vLLM's spawned EngineCore (see
  :mod:`recipe.vsearch.harmony_hook`). Two fixes, either is enough:

  1. *stage the vocab* on a machine with internet access and point every node at it:
     ``python -m recipe.vsearch.offline fetch-vocab /shared/tiktoken`` (openai_harmony's own download
     into its cache directory), then ``export TIKTOKEN_RS_CACHE_DIR=/shared/tiktoken`` before
     ``train.sh`` (forwarded to every worker; spawned processes inherit it). ``TIKTOKEN_ENCODINGS_BASE``
     (a directory holding ``o200k_base.tiktoken``) works too;
  2. *tolerate its absence*: ``python -m recipe.vsearch.offline install-harmony-hook`` in the training
     venv installs :mod:`recipe.vsearch.harmony_hook` as a ``.pth`` start-up hook (every interpreter of
     that venv, spawned ones included). ``scripts/setup.sh`` does this for the CPU training venv.

:func:`check_harmony_vocab` runs in the driver before Ray starts (``main.py``) and turns the failure
that would otherwise surface as a traceback inside a Ray worker into one message naming both fixes.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import os
import shutil
import sys
import sysconfig
from collections.abc import Callable
from pathlib import Path
from typing import Any

HOOK_MODULE = "vsearch_harmony_hook"
#: vLLM versions whose verl 0.7.0 server module loads the harmony vocab at import
VLLM_VERSIONS_LOADING_HARMONY = ("0.12.0",)
VOCAB_ENV = ("TIKTOKEN_RS_CACHE_DIR", "TIKTOKEN_ENCODINGS_BASE")


class OfflineStartupError(RuntimeError):
    """The recipe would fail at start-up on this node (message says how to fix it)."""


def vllm_version() -> str | None:
    try:
        return importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        return None


def hook_installed() -> bool:
    """Whether :mod:`recipe.vsearch.harmony_hook` runs at start-up in this interpreter (its .pth)."""
    return HOOK_MODULE in sys.modules


def harmony_loads_at_import(version: str | None) -> bool:
    return version is not None and version.split("+", 1)[0] in VLLM_VERSIONS_LOADING_HARMONY


def load_vocab() -> None:
    """What verl's import does (without importing vLLM): load gpt-oss's harmony encoding."""
    from openai_harmony import HarmonyEncodingName, load_harmony_encoding

    load_harmony_encoding(HarmonyEncodingName.HARMONY_GPT_OSS)


def check_harmony_vocab(
    rollout_name: str, *, version: str | None = None, loader: Callable[..., Any] = load_vocab
) -> str:
    """Raise :class:`OfflineStartupError` when verl's vLLM server module would fail to import here.
    Returns a one-line status for the start-up log."""
    version = vllm_version() if version is None else version
    if rollout_name != "vllm" or not harmony_loads_at_import(version):
        return f"harmony vocab: not needed (rollout {rollout_name}, vllm {version})"
    try:
        loader()
        return "harmony vocab: loads"
    except Exception as e:
        if hook_installed():
            return f"harmony vocab: unavailable ({e}); tolerated by {HOOK_MODULE}"
        staged = {k: os.environ[k] for k in VOCAB_ENV if os.environ.get(k)}
        raise OfflineStartupError(
            f"verl 0.7.0 loads openai_harmony's o200k_base vocab when it imports its vLLM {version} server, in "
            f"every Ray worker and in vLLM's EngineCore, and it cannot be loaded here: {e}"
            + (f" (staged: {staged})" if staged else "")
            + ". Either stage it (on a machine with internet access: `python -m recipe.vsearch.offline fetch-vocab "
            "DIR`, then `export TIKTOKEN_RS_CACHE_DIR=DIR` on every node before train.sh; DIR must be readable on "
            "all nodes), or install the start-up hook that tolerates its absence in every process of this venv: "
            "`python -m recipe.vsearch.offline install-harmony-hook` (see recipe/vsearch/README.md, Offline nodes)."
        ) from None


def site_packages() -> Path:
    return Path(sysconfig.get_paths()["purelib"])


def install_hook(site: Path | None = None) -> Path:
    """Copy :mod:`recipe.vsearch.harmony_hook` into ``site`` as a top-level module and add its ``.pth``."""
    site = site or site_packages()
    src = Path(__file__).with_name("harmony_hook.py")
    shutil.copyfile(src, site / f"{HOOK_MODULE}.py")
    (site / f"{HOOK_MODULE}.pth").write_text(f"import {HOOK_MODULE}\n")
    return site


def uninstall_hook(site: Path | None = None) -> None:
    site = site or site_packages()
    for name in (f"{HOOK_MODULE}.py", f"{HOOK_MODULE}.pth"):
        (site / name).unlink(missing_ok=True)


def ensure_harmony(
    rollout_name: str,
    *,
    version: str | None = None,
    loader: Callable[..., Any] = load_vocab,
    site: Path | None = None,
) -> str:
    """Make this venv start offline: nothing when the vocab loads (or is not needed) or the hook is in; else, unless a
    vocab directory is staged (then the staged directory is what is wrong, and the error says so), install the
    start-up hook into ``site`` (this venv's). Returns one status line; a new interpreter then passes
    :func:`check_harmony_vocab` (``smoke_gpu.sh``'s first check runs ``ensure`` then ``check``)."""
    try:
        return check_harmony_vocab(rollout_name, version=version, loader=loader)
    except OfflineStartupError:
        if any(os.environ.get(k) for k in VOCAB_ENV):
            raise
    where = install_hook(site)
    return f"harmony vocab: unavailable offline; installed the start-up hook {HOOK_MODULE} in {where}"


def fetch_vocab(directory: Path) -> Path:
    """openai_harmony's own download of its vocab into ``directory`` (its download cache,
    ``TIKTOKEN_RS_CACHE_DIR``). Needs internet access; run it once, then share ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    os.environ["TIKTOKEN_RS_CACHE_DIR"] = str(directory.resolve())
    load_vocab()
    return directory


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(allow_abbrev=False, description="offline start-up helpers of the vsearch recipe")
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("install-harmony-hook", allow_abbrev=False, help="install the harmony start-up hook into this venv")
    sub.add_parser("uninstall-harmony-hook", allow_abbrev=False, help="remove it")
    fv = sub.add_parser(
        "fetch-vocab", allow_abbrev=False, help="download openai_harmony's vocab into DIR (needs internet access)"
    )
    fv.add_argument("directory", type=Path)
    ck = sub.add_parser("check", allow_abbrev=False, help="would verl's vLLM server module import here?")
    ck.add_argument("--rollout", default="vllm")
    en = sub.add_parser(
        "ensure", allow_abbrev=False, help="install the start-up hook if the vocab cannot load here (none staged)"
    )
    en.add_argument("--rollout", default="vllm")
    args = ap.parse_args(argv)
    if args.cmd == "install-harmony-hook":
        print(f"installed {HOOK_MODULE} in {install_hook()}")
    elif args.cmd == "uninstall-harmony-hook":
        uninstall_hook()
    elif args.cmd == "fetch-vocab":
        d = fetch_vocab(args.directory)
        print(f"vocab cached in {d}; export TIKTOKEN_RS_CACHE_DIR={d.resolve()} on every node")
    else:
        try:
            print(ensure_harmony(args.rollout) if args.cmd == "ensure" else check_harmony_vocab(args.rollout))
        except OfflineStartupError as e:
            print(f"[vsearch] error: {e}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
