"""The package's commands as ``[project.scripts]`` declares them, so a test over "every command" needs no list of its
own: each console script's parser and those of its subcommands, and the commands of each kind by what their flags
say they do."""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Iterator
from functools import cache

import pytest

from tests.support.stacks import REPO


@cache
def console_scripts() -> dict[str, str]:
    """``[project.scripts]``: console script -> ``module:function``."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    with open(REPO / "pyproject.toml", "rb") as f:
        return dict(tomllib.load(f)["project"]["scripts"])


def options(parser: argparse.ArgumentParser) -> set[str]:
    """Every option string the parser accepts (hidden old spellings included)."""
    return {s for a in parser._actions for s in a.option_strings}


def flag_actions(parser: argparse.ArgumentParser, prefix: str = "") -> Iterator[tuple[str, argparse.Action]]:
    """Every flag (and positional) of ``parser`` and of its subcommands as ``(subcommand prefix, action)``: ``("",
    action)`` for the command's own, ``("extract ", action)`` for a subcommand's; ``--help`` left out."""
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            for name, sub in a.choices.items():
                yield from flag_actions(sub, f"{prefix}{name} ")
        elif a.dest not in ("help", argparse.SUPPRESS):
            yield prefix, a


def command_parsers() -> dict[str, argparse.ArgumentParser]:
    """Each command's parser by its name (the module's, ``evaluate``), and each subcommand's (``build_o3_bench
    extract``); a fresh parser per call."""
    out: dict[str, argparse.ArgumentParser] = {}
    for target in console_scripts().values():
        module = target.split(":")[0]
        name = module.rsplit(".", 1)[1]
        parser = importlib.import_module(module).build_parser()
        out[name] = parser
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                out.update({f"{name} {sub}": p for sub, p in action.choices.items()})
    return out


def with_subcommands() -> set[str]:
    """The console scripts' commands whose steps are subcommands (``build_o3_bench extract``): those whose parser
    has subparsers."""
    return {
        name
        for name, p in command_parsers().items()
        if " " not in name and any(isinstance(a, argparse._SubParsersAction) for a in p._actions)
    }


def run_commands() -> dict[str, argparse.ArgumentParser]:
    """The commands that run a resumable job over a run directory (their records counted by a progress bar that
    ``--no_progress`` hides): the ones whose settings the directory's first run fixes."""
    return {name: p for name, p in command_parsers().items() if "--no_progress" in options(p)}


def api_commands() -> dict[str, argparse.ArgumentParser]:
    """The commands that call model endpoints (each asked once before the first item, unless
    ``--skip_endpoint_check``)."""
    return {name: p for name, p in command_parsers().items() if "--skip_endpoint_check" in options(p)}
