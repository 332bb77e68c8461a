"""What every command-line tool shares: exit codes, logging, the common flags and ``run_main``.

Exit codes: :class:`~insight_o3.base.exit_codes.ExitCode` (the same for every ``insight_o3.scripts.*`` command and
``insight-o3-*`` console script); :func:`report_stop` maps every deliberate stop to its code and one line.

Every command's ``main`` is wrapped in :func:`entry_point`: Ctrl-C (SIGINT) and SIGTERM stop it the same way —
work in flight is cancelled, finished records stay as written, worker processes end with it — and it ends
with one line on stderr and status 4 (``STOPPED``), never a traceback.

Flags shared by several commands have one spelling everywhere (``--output_dir``, ``--api_base_url``,
``--api_key``, ``--concurrency``, ``--max_retries``, ``--client_timeout``, ``--max_failure_ratio``,
``--image_workers``, ``--image_cache``, ``--no_progress``); older spellings that the docs once used (``--out_dir``,
``--base_url``, ``--timeout`` ...) keep working as hidden aliases.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import logging
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import TYPE_CHECKING, Any, NoReturn, TypeAlias, TypeVar

from ..base.caps import DEFAULT_MAX_REPLY_CHARS
from ..base.exit_codes import ExitCode
from ..base.paths import ALLOW_OUTSIDE_FLAG, BadOutputName, check_output_name
from ..base.redaction import RedactingFilter, redact
from ..base.setting_kinds import Kind
from ..endpoints.defaults import DEFAULT_MAX_FAILURE_RATIO, DEFAULT_MIN_REQUESTS, DEFAULT_TIMEOUT, quiet_http_logs
from ..endpoints.endpoint import ENV_KEYS, Endpoint, Sourced, borrowed_key, describe, resolve_key, sourced
from ..imaging.limits import DEFAULT_MAX_DECODE_VALUES

if TYPE_CHECKING:  # imported where used: a command's --help loads neither asyncio, the openai SDK nor Pillow
    from ..imaging.prepared_cache import ImageCacheSettings
    from ..jobs.controls import RunControls
    from ..jobs.integrity import Invocation

__all__ = [
    "ExitCode",
    "BadInput",
    "stop_errors",
    "entry_point",
    "report_stop",
    "run_main",
    "new_parser",
    "setup_logging",
]

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
log = logging.getLogger("insight_o3.scripts")


def stop_errors() -> tuple[type[BaseException], ...]:
    """The errors that stop a run on purpose (each has its exit code in :func:`report_stop`)."""
    from ..endpoints.guard import RunStopped
    from ..storage.atomic import OutputError
    from ..storage.lock import RunLockedError

    return (RunStopped, OutputError, RunLockedError)


class BadInput(ValueError):
    """Bad input found after parsing (a file, a field, settings that do not match); exit code 2.
    The message names the file, line and field where there is one."""


#: Option strings still accepted but left out of ``--help`` (old spellings kept for compatibility).
HIDDEN_ALIASES = frozenset(
    {
        "--out_dir",
        "--out",
        "--base_url",
        "--judge_base_url",
        "--timeout",
        "--max_pixels",  # -> --img_max_pixels (evaluate_vsearch: --vsearcher_max_pixels)
        "--prompt",  # evaluate_vsearch -> --vsearcher_prompt
        "--separate_attempt_requests",  # -> --separate_trial_requests
    }
)
#: The one default root of every command's outputs (``<OUTPUT_ROOT>/eval``, ``<OUTPUT_ROOT>/vsearch/<model>``, ...).
OUTPUT_ROOT = "outputs"


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Shows each option under its current name only (hidden aliases stay usable)."""

    def _format_action_invocation(self, action: argparse.Action) -> str:
        shown = [s for s in action.option_strings if s not in HIDDEN_ALIASES]
        if action.option_strings and shown and len(shown) < len(action.option_strings):
            action = _copy_with_options(action, shown)
        return super()._format_action_invocation(action)


def _copy_with_options(action: argparse.Action, option_strings: list[str]) -> argparse.Action:
    import copy

    a = copy.copy(action)
    a.option_strings = option_strings
    return a


def _option_strings(parser: argparse.ArgumentParser) -> list[str]:
    """Every option string of ``parser`` and of its subcommands (hidden aliases included)."""
    out: list[str] = []
    for action in parser._actions:
        out += [s for s in action.option_strings if s.startswith("--")]
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                out += _option_strings(sub)
    return out


def closest_flags(parser: argparse.ArgumentParser, flag: str, n: int = 3) -> list[str]:
    """The flag names of ``parser`` closest to a mistyped ``flag`` (its value after ``=`` ignored), best first;
    hidden aliases are suggested under their current name."""
    import difflib

    name = flag.split("=", 1)[0]
    known = sorted(set(_option_strings(parser)))
    current = {}
    for action in parser._actions:
        shown = [s for s in action.option_strings if s not in HIDDEN_ALIASES]
        for s in action.option_strings:
            current[s] = shown[0] if shown else s
    hits = difflib.get_close_matches(name, known, n=2 * n, cutoff=0.6)
    if not hits:  # a word of the flag that another flag contains ("--out" -> "--output_dir")
        stem = name.lstrip("-")
        hits = [k for k in known if stem and stem in k.lstrip("-")]
    out: list[str] = []
    for h in hits:
        h = current.get(h, h)
        if h not in out:
            out.append(h)
    return out[:n]


#: Where a command's flags are added: its parser or one of the parser's groups.
Flags: TypeAlias = argparse.ArgumentParser | argparse._ArgumentGroup


def _unknown_flags(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """The ``--flags`` of ``argv`` (before a bare ``--``) that ``parser`` and its subcommands do not know."""
    known = set(_option_strings(parser))
    out = []
    for arg in argv:
        if arg == "--":
            break
        name = arg.split("=", 1)[0]
        if name.startswith("--") and " " not in name and name not in known:
            out.append(arg)
    return out


class _Subcommands(argparse._SubParsersAction):
    """Subcommand parsers that report their own unknown flags (with their own ``--help``), not the parent's."""

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        parser = super().add_parser(name, **kwargs)
        parser._strict = True
        return parser


class ArgumentParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors come first and short: the error, the closest flag names for an
    unknown flag, and where the full usage is (``--help``), instead of a page of usage before the error.

    Abbreviations are off (``allow_abbrev=False``, here and in every subcommand): ``--num_trial 2`` is an unknown
    flag, not ``--num_trials``. An unknown flag is reported even when a required one is missing too (``--modle x``
    names ``--modle`` and suggests ``--model``), and a subcommand reports its own unknown flags."""

    _strict = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["allow_abbrev"] = False
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)
        self.register("action", "parsers", _Subcommands)
        self._argv: list[str] = []

    def parse_known_args(  # type: ignore[override]
        self, args: Any = None, namespace: Any = None
    ) -> tuple[argparse.Namespace, list[str]]:
        self._argv = list(sys.argv[1:] if args is None else args)
        ns, extras = super().parse_known_args(args, namespace)
        if extras and self._strict:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return ns, extras

    def error(self, message: str) -> NoReturn:
        unknown: list[str] = []
        if message.startswith("unrecognized arguments:"):
            unknown = message.split(":", 1)[1].split()
        elif message.startswith("the following arguments are required"):
            unknown = _unknown_flags(self, self._argv)
            if unknown:
                message = f"unrecognized arguments: {' '.join(unknown)}; {message}"
        lines = [f"{self.prog}: error: {message}"]
        for arg in unknown:
            if arg.startswith("-"):
                near = closest_flags(self, arg)
                if near:
                    lines.append(f"  {arg.split('=', 1)[0]}: did you mean {' or '.join(near)}?")
        lines.append(f"(all flags: {self.prog} --help)")
        self.exit(ExitCode.BAD_INPUT, "\n".join(lines) + "\n")


def new_parser(prog: str, description: str | None = None, **kwargs: Any) -> argparse.ArgumentParser:
    """An :class:`ArgumentParser` with the shared help formatter and no abbreviations (subcommands are made the same
    way)."""
    return ArgumentParser(prog=prog, description=description, **kwargs)


def setup_logging(level: int = logging.INFO) -> None:
    """The one logging set-up of every command: timestamped lines on stderr, no line per HTTP request,
    API keys redacted from every line."""
    logging.basicConfig(level=level, format=LOG_FORMAT)
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter())
    quiet_http_logs()


def seconds_since_start(fallback: float) -> float:
    """Wall seconds since this process started — Python's start-up and the imports included, as a user's clock
    sees a command — from ``/proc`` (Linux); elsewhere ``time.perf_counter() - fallback``."""
    import os
    import time

    try:
        with open("/proc/self/stat", encoding="ascii") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        with open("/proc/uptime", encoding="ascii") as f:
            uptime = float(f.read().split()[0])
        return uptime - int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22: start time, in ticks since boot
    except (OSError, ValueError, IndexError):
        return time.perf_counter() - fallback


# ----------------------------------------------------------------------------- shared flags
#: The attribute of a flag's ``argparse.Action`` holding the run-integrity kind :func:`setting` declared.
KIND_ATTR = "setting_kind"


def setting(p: Flags, *flags: str, kind: Kind, **kwargs: Any) -> argparse.Action:
    """``p.add_argument(*flags, **kwargs)`` for a flag that is a run's setting, with its run-integrity ``kind``
    (:class:`~insight_o3.base.setting_kinds.Kind`: what a run directory's first run fixes, what may change, what
    may grow, what is never written)."""
    action = p.add_argument(*flags, **kwargs)
    setattr(action, KIND_ATTR, kind)
    return action


def declared_kind(action: argparse.Action) -> Kind | None:
    """The kind :func:`setting` declared for a flag (None: a flag added without one)."""
    kind = getattr(action, KIND_ATTR, None)
    return kind if isinstance(kind, Kind) else None


def flag_kinds(parser: argparse.ArgumentParser) -> dict[str, Kind]:
    """The kind each flag of ``parser`` and of its subcommands declares, by ``dest`` (flags declaring none are left
    out: an :class:`~insight_o3.jobs.integrity.Invocation` refuses them). One ``dest`` is one setting: two flags
    declaring it with two kinds are a programming error."""
    declared: list[tuple[str, Kind]] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            declared += [item for sub in action.choices.values() for item in flag_kinds(sub).items()]
        elif (kind := declared_kind(action)) is not None:
            declared.append((action.dest, kind))
    out: dict[str, Kind] = {}
    for dest, kind in declared:
        if out.setdefault(dest, kind) is not kind:
            raise ValueError(f"{parser.prog}: {dest!r} declared as {out[dest].value} and {kind.value}")
    return out


def non_empty(text: str) -> str:
    """An argparse ``type`` for a name that must not be empty (``--model "$MODEL"`` with ``$MODEL`` unset)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty (an unset shell variable?)")
    return text


def output_name(text: str) -> str:
    """An argparse ``type`` for a name joined below an output directory (:func:`~insight_o3.base.paths.
    check_output_name`: not empty, not absolute, no ``..``)."""
    try:
        return check_output_name(text)
    except BadOutputName as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def check_output_names(p: argparse.ArgumentParser, **names: str | None) -> None:
    """``p.error`` (exit 2) unless each given name (flag name -> value; None skipped) stays below its output
    directory; for names derived from other flags (``--eval_name`` from ``--model``)."""
    for flag, value in names.items():
        if value is not None:
            try:
                check_output_name(value)
            except BadOutputName as e:
                p.error(f"--{flag}: {e}")


def add_output_dir(
    p: Flags,
    *,
    dest: str = "output_dir",
    required: bool = False,
    default: str | None = None,
    help: str = "where results go",
    aliases: tuple[str, ...] = ("--out_dir",),
) -> None:
    setting(
        p, "--output_dir", *aliases, dest=dest, required=required, default=default, help=help, kind=Kind.OPERATIONAL
    )


def add_output_file(p: Flags, *, default: str, help: str, dest: str = "out") -> None:
    """``--output_file`` (``--out`` is a hidden alias): the one file a command writes (an HTML page)."""
    p.add_argument("--output_file", "--out", dest=dest, default=default, help=help)


def add_image_budget_flag(p: Flags, *, default: int | None, help: str) -> None:
    """``--img_max_pixels`` (the released evaluate's name; ``--max_pixels`` is a hidden alias): the pixel budget of
    the whole images a model is sent."""
    setting(
        p,
        "--img_max_pixels",
        "--max_pixels",
        dest="img_max_pixels",
        type=int,
        default=default,
        help=help,
        kind=Kind.RESULT,
    )


def add_separate_requests_flag(p: Flags, *, what: str = "trial", count_flag: str = "--num_trials") -> None:
    """``--separate_trial_requests`` (the released evaluate's name; ``--separate_attempt_requests`` is a hidden alias)."""
    # operational: n=k in one request or k requests ask the same question, batched differently
    setting(
        p,
        "--separate_trial_requests",
        "--separate_attempt_requests",
        dest="separate_trial_requests",
        action="store_true",
        help=f"one request per {what} instead of n={count_flag} (for APIs that reject n>1)",
        kind=Kind.OPERATIONAL,
    )


def add_vsearcher_flags(p: Flags, *, default_max_pixels: int, aliases: bool = False) -> None:
    """``--vsearcher_max_pixels`` and ``--vsearcher_prompt`` (``aliases``: also the hidden ``--max_pixels`` /
    ``--prompt`` that ``evaluate_vsearch`` once used)."""
    setting(
        p,
        "--vsearcher_max_pixels",
        *(["--max_pixels"] if aliases else []),
        dest="vsearcher_max_pixels",
        type=int,
        default=default_max_pixels,
        help=f"the vSearcher's image budget on Qwen2.5-VL's grid (default {default_max_pixels})",
        kind=Kind.RESULT,
    )
    setting(
        p,
        "--vsearcher_prompt",
        *(["--prompt"] if aliases else []),
        dest="vsearcher_prompt",
        choices=("trained", "simple"),
        default="trained",
        help="trained: the RL-trained vSearcher's prompt; simple: a plain localisation prompt",
        kind=Kind.RESULT,
    )


def add_judge_flags(p: Flags, *, model_help: str = "", url_help: str, key_help: str, many: bool = False) -> None:
    """``--judge_model``, ``--judge_api_base_url`` (hidden alias ``--judge_base_url``) and ``--judge_api_key``: the
    same spelling in every command that asks a judge (``many``: one or more values each, as ``rejudge``)."""
    nargs: dict[str, Any] = {"nargs": "+"} if many else {}
    setting(
        p,
        "--judge_model",
        required=many,
        type=non_empty,
        default=None if many else "gpt-5-nano",
        help=model_help,
        **nargs,
        kind=Kind.RESULT,
    )
    setting(
        p,
        "--judge_api_base_url",
        "--judge_base_url",
        dest="judge_api_base_url",
        help=url_help,
        **nargs,
        kind=Kind.OPERATIONAL,
    )
    setting(p, "--judge_api_key", help=key_help, **nargs, kind=Kind.SECRET)


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {value}")
    return value


def add_judge_retries_flag(p: Flags) -> None:
    """``--judge_retries``: judgings more of an attempt whose judge reply was ambiguous or malformed
    (:class:`insight_o3.evaluation.judge.AnswerJudge`)."""
    from ..evaluation.judge_settings import DEFAULT_JUDGE_RETRIES

    # operational: asks again only where the judging would otherwise be a failure
    setting(
        p,
        "--judge_retries",
        type=_non_negative_int,
        default=DEFAULT_JUDGE_RETRIES,
        help=f"judge an attempt again, fresh, this many times when the judge's reply is ambiguous or malformed, "
        f"before it is a failed record (--retry_failed judges it again on a rerun; default {DEFAULT_JUDGE_RETRIES})",
        kind=Kind.OPERATIONAL,
    )


def add_api_flags(p: Flags, *, env: str = "main", prefix: str = "", aliases: bool = False) -> None:
    """``--{prefix}api_base_url`` / ``--{prefix}api_key`` with the env vars of ``api.ENV_KEYS[env]`` in the help.
    ``aliases``: also accept the older ``--{prefix}base_url``."""
    keys, urls = ENV_KEYS[env]
    url_opts = [f"--{prefix}api_base_url"] + ([f"--{prefix}base_url"] if aliases else [])
    url_help = "default: " + ", then ".join(f"${n}" for n in urls)
    setting(p, *url_opts, dest=f"{prefix}api_base_url", default=None, help=url_help, kind=Kind.OPERATIONAL)
    key_help = "default: " + ", then ".join(f"${n}" for n in keys)
    setting(p, f"--{prefix}api_key", default=None, help=key_help, kind=Kind.SECRET)


def add_key_host_flag(p: Flags) -> None:
    """``--allow_key_to_other_host``: a role without a key of its own may borrow another role's key (the judge the
    model's) even where the two are on different hosts (:func:`insight_o3.endpoints.client.borrowed_key`)."""
    setting(
        p,
        "--allow_key_to_other_host",
        action="store_true",
        help="let the judge use the model's key (--api_key / $OPENAI_API_KEY) although the judge is on another host "
        "(default: refused, exit 2: a key is sent only to the host it belongs to)",
        kind=Kind.OPERATIONAL,
    )


def add_allow_outside_flag(p: Flags) -> None:
    """``--allow_outside_img_dir``: image names of the input file may leave ``--img_dir`` (see :mod:`insight_o3.base.paths`)."""
    setting(
        p,
        ALLOW_OUTSIDE_FLAG,
        kind=Kind.OPERATIONAL,
        action="store_true",
        help="let the annotation file name images outside --img_dir (absolute paths, '..', symlinks out); "
        "off by default, so a file from elsewhere cannot make the run read and send any image you can read",
    )


def add_cap_flags(p: Flags, *, reply: bool = True, decode: bool = True) -> None:
    """``--max_reply_chars`` (characters of each reply text a record keeps) and ``--max_decode_values`` (pixels x
    channels one image may take to decode); see :mod:`insight_o3.base.caps` and :func:`insight_o3.imaging.images.open_image`."""
    if reply:
        # operational (a cap on untrusted sizes): a reply is judged whole before its record keeps this much of it
        setting(
            p,
            "--max_reply_chars",
            type=int,
            default=DEFAULT_MAX_REPLY_CHARS,
            help=f"characters of each reply text a record keeps; a longer one keeps its beginning and end around a "
            f"marker (default: {DEFAULT_MAX_REPLY_CHARS}, more than a 16K-token reply; replies are judged whole); "
            f"a reply body over n x 2 x this x 12 bytes + 256 KiB is refused while read (a failed request)",
            kind=Kind.OPERATIONAL,
        )
    if decode:
        # operational (a cap on untrusted sizes): an image over it is a failed sample, recovered by --retry_failed
        setting(
            p,
            "--max_decode_values",
            type=int,
            default=DEFAULT_MAX_DECODE_VALUES,
            help=f"refuse (as a failed sample) an image whose decoding takes more than this many pixels x channels "
            f"(an RGB copy counts 3 more per pixel); default {DEFAULT_MAX_DECODE_VALUES}, about 0.8 GB",
            kind=Kind.OPERATIONAL,
        )


#: What ``--client_timeout`` means (see :class:`insight_o3.endpoints.client.DeadlineHttpClient`).
CLIENT_TIMEOUT_HELP = (
    "total deadline in seconds of each HTTP attempt, from connecting to the last byte of the reply (a slow or "
    "trickling server cannot hold a request longer); each of the SDK's --max_retries retries gets a fresh one"
)


def add_client_flags(p: Flags, *, max_retries: int, client_timeout: float | None = None, aliases: bool = False) -> None:
    """``--max_retries`` (the openai SDK's retries), ``--client_timeout`` (:data:`CLIENT_TIMEOUT_HELP`) and
    ``--skip_endpoint_check`` (:mod:`insight_o3.endpoints.preflight`)."""
    setting(
        p,
        "--max_retries",
        type=int,
        default=max_retries,
        help=f"the openai SDK's retries per request (default: {max_retries})",
        kind=Kind.OPERATIONAL,
    )
    setting(
        p,
        "--skip_endpoint_check",
        action="store_true",
        help="do not ask every endpoint (models list) before the first item (an unreachable one or a refused key "
        "otherwise stops the run at once, status 4)",
        kind=Kind.OPERATIONAL,
    )
    opts = ["--client_timeout"] + (["--timeout"] if aliases else [])
    setting(
        p,
        *opts,
        dest="client_timeout",
        type=float,
        default=client_timeout,
        help=f"{CLIENT_TIMEOUT_HELP} (default: {client_timeout if client_timeout else DEFAULT_TIMEOUT:g})",
        kind=Kind.OPERATIONAL,
    )


def add_run_flags(
    p: Flags,
    *,
    concurrency: int | None,
    failure_ratio: bool = True,
    image_workers: bool = True,
    progress: bool = True,
    concurrency_help: str = "requests in flight",
) -> None:
    """``--concurrency`` (None: not added), ``--max_failure_ratio``, ``--image_workers`` and ``--no_progress``."""
    if concurrency is not None:
        setting(
            p,
            "--concurrency",
            type=int,
            default=concurrency,
            help=f"{concurrency_help} (default: {concurrency})",
            kind=Kind.OPERATIONAL,
        )
    if failure_ratio:
        setting(
            p,
            "--max_failure_ratio",
            type=float,
            default=DEFAULT_MAX_FAILURE_RATIO,
            help=f"stop when more than this share of the requests failed after retries, judged from "
            f"the {DEFAULT_MIN_REQUESTS}th request on (1 = never); a 401/403/404 stops at once",
            kind=Kind.OPERATIONAL,
        )
    if image_workers:
        setting(
            p,
            "--image_workers",
            type=int,
            default=None,
            help="image decode/resize/encode processes (default: the usable CPUs; 0 = threads)",
            kind=Kind.OPERATIONAL,
        )
    if progress:
        setting(p, "--no_progress", action="store_true", help="no progress bar", kind=Kind.OPERATIONAL)


def add_image_cache_flag(p: Flags) -> None:
    """``--image_cache off|DIR|SIZE`` (given zero or more times): the prepared-image cache shared across runs
    (:mod:`insight_o3.imaging.prepared_cache`); read with :func:`image_cache_settings`."""
    # operational: the same bytes either way (keyed by everything they depend on)
    setting(
        p,
        "--image_cache",
        action="append",
        default=None,
        metavar="off|DIR|SIZE",
        help="the encoded images kept on disk for later runs on the same images (the same bytes are sent): "
        "'off', a directory (default: $XDG_CACHE_HOME/insight-o3/images) and/or a size limit such as 4G "
        "(default: 2G; least recently used entries go first); may be given twice (a directory and a size)",
        kind=Kind.OPERATIONAL,
    )


def image_cache_settings(p: argparse.ArgumentParser, a: argparse.Namespace) -> ImageCacheSettings:
    """The settings of ``--image_cache`` (a bad value: ``p.error``, exit 2). A directory the user named that
    cannot hold the cache is an error; the default one that cannot is a warning and no cache."""
    from ..imaging.prepared_cache import ImageCacheSettings

    try:
        settings = ImageCacheSettings.parse(getattr(a, "image_cache", None))
    except ValueError as e:
        p.error(f"--image_cache: {e}")
    problem = settings.problem()
    if problem is None:
        return settings
    if settings.explicit:
        p.error(f"--image_cache: {problem}")
    logging.getLogger(__name__).warning("no prepared-image cache this run: %s", problem)
    return ImageCacheSettings(directory=None)


def add_budget_flags(p: Flags, *, what: str = "items") -> None:
    """``--price_file``, ``--max_cost`` and ``--max_tokens_total`` (see :class:`insight_o3.jobs.budget.Budget`)."""
    setting(
        p,
        "--price_file",
        help="YAML/JSON of US$ per million tokens per model: "
        "'MODEL: {input: X, output: Y}'; adds cost_usd to records and metrics",
        kind=Kind.OPERATIONAL,
    )
    setting(
        p,
        "--max_cost",
        type=float,
        default=None,
        help=f"stop starting {what} once the eval dir's recorded cost reaches this many US$ "
        "(needs --price_file; exit 4; rerun with a higher budget to resume)",
        kind=Kind.OPERATIONAL,
    )
    setting(
        p,
        "--max_tokens_total",
        type=int,
        default=None,
        help="the same for prompt + completion tokens of all roles",
        kind=Kind.OPERATIONAL,
    )


def add_token_budget_flag(p: Flags) -> None:
    """``--max_tokens_total`` of the data tools, whose records carry no usage: it counts this run's requests."""
    setting(
        p,
        "--max_tokens_total",
        type=int,
        default=None,
        help="stop starting new items once this run's requests used this many prompt + completion tokens "
        "(exit 4; finished items are kept; rerun to go on)",
        kind=Kind.OPERATIONAL,
    )


def check_run_flags(p: argparse.ArgumentParser, a: argparse.Namespace) -> None:
    """The range checks of the shared flags that ``a`` has (``p.error`` -> exit code 2)."""
    if getattr(a, "concurrency", 1) < 1:
        p.error("--concurrency must be at least 1")
    if getattr(a, "max_retries", 0) < 0:
        p.error("--max_retries must not be negative")
    if getattr(a, "client_timeout", None) is not None and a.client_timeout <= 0:
        p.error("--client_timeout must be positive")
    if not 0 < getattr(a, "max_failure_ratio", 1) <= 1:
        p.error("--max_failure_ratio must be in (0, 1]")
    if getattr(a, "image_workers", None) is not None and a.image_workers < 0:
        p.error("--image_workers must not be negative")
    if getattr(a, "max_tokens_total", None) is not None and a.max_tokens_total < 1:
        p.error("--max_tokens_total must be positive")
    for name in ("max_reply_chars", "max_decode_values"):
        if getattr(a, name, 1) < 1:
            p.error(f"--{name} must be positive")


def run_controls(a: argparse.Namespace) -> RunControls:
    """The :class:`~insight_o3.jobs.controls.RunControls` of the shared flags (:func:`add_run_flags`,
    :func:`add_budget_flags`, :func:`add_client_flags`); a flag the command does not have keeps the default."""
    from ..jobs.controls import RunControls

    d = RunControls()
    return RunControls(
        concurrency=getattr(a, "concurrency", d.concurrency),
        progress=not getattr(a, "no_progress", False),
        max_failure_ratio=getattr(a, "max_failure_ratio", d.max_failure_ratio),
        max_cost=getattr(a, "max_cost", None),
        max_tokens_total=getattr(a, "max_tokens_total", None),
        price_file=getattr(a, "price_file", None),
        check_endpoints=not getattr(a, "skip_endpoint_check", False),
        image_workers=getattr(a, "image_workers", None),
    )


def endpoint_of(
    a: argparse.Namespace, env: str = "main", *, prefix: str = "", key_env: str | None = None, role: str | None = None
) -> Endpoint:
    """The :class:`~insight_o3.endpoints.endpoint.Endpoint` of ``--{prefix}api_base_url`` / ``--{prefix}api_key``
    (:func:`add_api_flags`), each else from the environment variables of ``ENV_KEYS[env]`` (``key_env``: the key
    from that variable only, which must then be set), with ``--client_timeout`` and ``--max_retries``. Its URL and
    key source are stated in one line (``role``, default the prefix or ``env``; the key never). A judge without a key
    of its own gets ``$OPENAI_API_KEY`` only on the host that key belongs to (:func:`judge_key`; raises
    :class:`~insight_o3.endpoints.endpoint.KeyHostError`)."""
    keys, urls = ENV_KEYS[env]
    flag_url, flag_key = getattr(a, f"{prefix}api_base_url", None), getattr(a, f"{prefix}api_key", None)
    url = sourced(flag_url, f"--{prefix}api_base_url", urls)
    own_keys = (key_env,) if key_env else keys
    resolve_key(flag_key, own_keys, flag=f"--{prefix}api_key")  # registered as a secret, warned of as a flag
    if env == "judge" and not key_env:
        key = judge_key(a, url, sourced(flag_key, f"--{prefix}api_key", ("JUDGE_API_KEY",)))
    else:
        key = sourced(flag_key, f"--{prefix}api_key", own_keys)
    log.info("endpoints: %s", describe(role or prefix.rstrip("_") or env, url, key))
    return Endpoint(
        base_url=url.value,
        api_key=key.value,
        key_env=key_env,
        timeout=getattr(a, "client_timeout", None),
        max_retries=getattr(a, "max_retries", None),
    )


def judge_key(a: argparse.Namespace, url: Sourced, own: Sourced) -> Sourced:
    """The judge's key: its own (``own``: its flag or ``$JUDGE_API_KEY``), else ``$OPENAI_API_KEY`` only to the host
    it belongs to (``$OPENAI_BASE_URL``'s, else the SDK's default); ``--allow_key_to_other_host`` lifts that."""
    resolve_key(None, ("OPENAI_API_KEY",))  # registered as a secret
    lender_url, lender_key = sourced(None, "", ("OPENAI_BASE_URL",)), sourced(None, "", ("OPENAI_API_KEY",))
    allow = bool(getattr(a, "allow_key_to_other_host", False))
    return borrowed_key("judge", url, own, "$OPENAI_BASE_URL endpoint", lender_url, lender_key, allow)


def invocation_of(
    command: str,
    parser: argparse.ArgumentParser,
    a: argparse.Namespace,
    *,
    skip: tuple[str, ...] = (),
    **derived: Any,
) -> Invocation:
    """The :class:`~insight_o3.jobs.integrity.Invocation` of a command line: every flag of ``a`` (less ``skip``,
    e.g. a subcommand's name) with the kind its declaration in ``parser`` gives it, ``derived`` values and the
    code's version and commit as provenance."""
    from .. import __version__
    from ..jobs.integrity import Invocation, git_commit

    settings = {k: v for k, v in vars(a).items() if k not in skip}
    provenance = {"version": __version__, "git_commit": git_commit()}
    return Invocation(command, settings, derived, provenance, kinds=flag_kinds(parser))


# ----------------------------------------------------------------------------- the run
def report_stop(e: BaseException, redact: Callable[[str], str] = redact, results: str | None = None) -> int:
    """Print the one-line message of a deliberate stop to stderr and return its exit code.

    ``results`` names where finished work lives (the eval directory, the records file)."""
    from ..endpoints.guard import RunStopped
    from ..endpoints.preflight import EndpointError
    from ..storage.atomic import OutputError
    from ..storage.lock import RunLockedError

    where = f" in {results}" if results else ""
    if isinstance(e, RunLockedError):
        print(f"error: {e}", file=sys.stderr)
        return ExitCode.LOCKED
    if isinstance(e, OutputError):
        if e.lost_dir:
            msg = (
                f"error: {e} — {e.advice}; what was written there is gone. Recreate it (or choose "
                f"another output directory) and rerun the command"
            )
        else:
            msg = (
                f"error: {e} — {e.advice}. Samples finished before this are safe{where}; rerun the same "
                f"command to resume"
            )
        print(redact(msg), file=sys.stderr)
        return ExitCode.OUTPUT_ERROR
    if isinstance(e, EndpointError):  # nothing ran yet
        print(redact(f"error: {e} (--skip_endpoint_check skips this check)"), file=sys.stderr)
        return ExitCode.STOPPED
    if isinstance(e, RunStopped):
        hint = f"; {e.resume_hint}" if e.resume_hint else ""
        print(redact(f"error: {e}. Samples finished before this are safe{where}{hint}"), file=sys.stderr)
        return ExitCode.STOPPED
    raise TypeError(f"not a stop error: {e!r}")


def run_main(
    body: Callable[[], int],
    *,
    bad_input: tuple[type[BaseException], ...] = (),
    redact: Callable[[str], str] = redact,
    results: str | None = None,
) -> int:
    """Run a command's body and map how it ends to an :class:`ExitCode`, with one line on stderr.

    ``bad_input``: exception types (besides :class:`BadInput`, a run's changed settings,
    :class:`~insight_o3.jobs.integrity.SettingsChanged`, an unreadable card, or an output directory that can never
    hold files, :class:`~insight_o3.storage.atomic.UnusableOutputDir`) that mean bad input (2); the
    deliberate stops (:func:`stop_errors`) map to 3/4/5; ``results`` names where finished
    work lives (for their message)."""
    from ..jobs.integrity import CardError, SettingsChanged
    from ..storage.atomic import UnusableOutputDir

    bad: tuple[type[BaseException], ...] = (BadInput, SettingsChanged, CardError, UnusableOutputDir, *bad_input)
    try:
        return int(body())
    except bad as e:
        print(f"error: {redact(str(e))}", file=sys.stderr)
        return ExitCode.BAD_INPUT
    except stop_errors() as e:
        return report_stop(e, redact, results)


# ----------------------------------------------------------------------------- signals
MainT = TypeVar("MainT", bound=Callable[..., int])
#: Set on the function :func:`entry_point` returns (tests check that every command has it).
ENTRY_POINT_ATTR = "__insight_o3_entry_point__"


def entry_point(main: MainT) -> MainT:
    """The wrapper of every command's ``main``: SIGINT and SIGTERM end it with one line and status 4.

    SIGTERM is handled as Ctrl-C is: it goes to the current SIGINT handler (inside ``asyncio.run`` that
    cancels the main task, so ``finally`` blocks close clients, image workers and record logs, and records
    already written stay; elsewhere it raises ``KeyboardInterrupt``). The ``KeyboardInterrupt`` that ends
    either is turned into ``stopped by SIG…; … rerun the same command to resume`` and
    :attr:`ExitCode.STOPPED`. A second signal while stopping stops at once, the same way."""

    @functools.wraps(main)
    def wrapper(*args: Any, **kwargs: Any) -> int:
        received: list[str] = []
        with _sigterm_as_interrupt(received):
            try:
                return main(*args, **kwargs)
            except KeyboardInterrupt:
                name = received[0] if received else "SIGINT"
                print(f"stopped by {name}; what finished is kept — rerun the same command to resume", file=sys.stderr)
                return ExitCode.STOPPED

    setattr(wrapper, ENTRY_POINT_ATTR, True)
    return wrapper  # type: ignore[return-value]


@contextlib.contextmanager
def _sigterm_as_interrupt(received: list[str]) -> Iterator[None]:
    """While inside: SIGTERM is passed to the SIGINT handler (only the main thread can set handlers)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        received.append("SIGTERM")
        handler = signal.getsignal(signal.SIGINT)
        if callable(handler):  # Python's default (raises KeyboardInterrupt) or asyncio.run's (cancels)
            handler(signal.SIGINT, frame)
        else:  # SIGINT ignored (a background job of a non-interactive shell): stop anyway
            raise KeyboardInterrupt

    old = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)
