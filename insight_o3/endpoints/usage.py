"""Token usage per role (model, judge, vSearcher) and its cost, per record, trial and run.

Every API client reports the ``usage`` of each response it parses to the :class:`UsageMeter` of the
current asyncio context (:func:`metering`); the runner opens one meter per solve and one per judging,
so a record's ``usage`` is what its attempt and its verdict cost:
``{"model": {"prompt_tokens", "completion_tokens", "reasoning_tokens", "requests"}, "judge": …}``
(only roles that were called). A reply without valid usage (none, or counters that are not non-negative
integers: :mod:`insight_o3.base.untrusted` drops those) still counts as a request and also in
``unreported_requests`` (written only when not 0): token counts — and the budgets and costs made from
them — are then lower bounds, flagged rather than estimated. A request that answers several trials at once (``n`` choices, or an
InSight-o3 solve of several trials) is split evenly over them (integer parts; the remainder goes to
the first trial), so sums over records equal what the endpoints reported.

Prices (``--price_file``, YAML or JSON) are US dollars per million tokens per model name::

    gpt-5-mini: {input: 0.25, output: 2.0}
    gpt-5-nano: {input: 0.05, output: 0.4}

Completion tokens (which include reasoning tokens, as the OpenAI API counts them) are billed at the
``output`` price. A record's ``cost_usd`` is None when there is no price file; a model missing from
the price file is an error before any request is sent.
"""

from __future__ import annotations

import contextvars
import json
import os
from dataclasses import dataclass
from typing import Any, TypeAlias

FIELDS = ("prompt_tokens", "completion_tokens", "reasoning_tokens", "requests", "unreported_requests")
#: Counters written only when not 0 (records of servers that report usage look as they always did).
OPTIONAL_FIELDS = ("unreported_requests",)
#: Client role names (as in messages) -> the role key of a record's usage.
ROLE_KEYS = {
    "model": "model",
    "vReasoner": "model",
    "judge": "judge",
    "vSearcher": "vsearcher",
    "vsearcher": "vsearcher",
    "summary": "summary",
}

#: One role's counters (:data:`FIELDS`; an optional one only when not 0).
UsageCounts: TypeAlias = dict[str, int]
#: A record's usage: role key (``model``, ``judge``, ``vsearcher``, ``summary``) -> its counters.
RoleUsage: TypeAlias = dict[str, UsageCounts]

_METER: contextvars.ContextVar[UsageMeter | None] = contextvars.ContextVar("insight_o3_usage_meter", default=None)
#: A run's meter of the current unit of work (:func:`metering_run`): every response is counted there too.
_RUN_METER: contextvars.ContextVar[UsageMeter | None] = contextvars.ContextVar("insight_o3_run_meter", default=None)


def _get(obj: Any, name: str) -> Any:
    if obj is None:
        return None
    if isinstance(obj, dict):
        return obj.get(name)
    return getattr(obj, name, None)


def usage_counts(usage: Any) -> UsageCounts:
    """The four counters of one response's ``usage`` (an SDK object or a dict)."""
    details = _get(usage, "completion_tokens_details")
    return {
        "prompt_tokens": int(_get(usage, "prompt_tokens") or 0),
        "completion_tokens": int(_get(usage, "completion_tokens") or 0),
        "reasoning_tokens": int(_get(details, "reasoning_tokens") or 0),
        "requests": 1,
    }


class UsageMeter:
    """Sums of the counters per role key."""

    def __init__(self) -> None:
        self.by_role: dict[str, dict[str, int]] = {}

    def add(self, role: str, counts: UsageCounts) -> None:
        key = ROLE_KEYS.get(role, role)
        acc = self.by_role.setdefault(key, dict.fromkeys(FIELDS, 0))
        for f in FIELDS:
            acc[f] += int(counts.get(f, 0))

    def to_dict(self) -> RoleUsage:
        return {r: _written(c) for r, c in self.by_role.items()}

    def split(self, n: int) -> list[RoleUsage]:
        """``n`` usage dicts whose sums are this meter's (even integer shares, remainder to the first)."""
        out: list[RoleUsage] = [{} for _ in range(n)]
        for role, counts in self.by_role.items():
            for i in range(n):
                out[i][role] = _written({f: counts[f] // n + (counts[f] % n if i == 0 else 0) for f in FIELDS})
        return out


def _written(counts: UsageCounts) -> UsageCounts:
    return {f: v for f, v in counts.items() if v or f not in OPTIONAL_FIELDS}


def metering(meter: UsageMeter) -> contextvars.Token:
    """Make ``meter`` the current context's meter (tasks created from here on inherit it)."""
    return _METER.set(meter)


def metering_run(meter: UsageMeter) -> contextvars.Token:
    """Make ``meter`` the current context's run meter: every response is added to it as well as to the current
    meter, whichever that is (a job gives each unit of work one, so that what a run spent includes the replies of
    units it never recorded)."""
    return _RUN_METER.set(meter)


def record_response(role: str, response: Any) -> None:
    """Called by the API clients for every parsed response (after :func:`insight_o3.base.untrusted.check_reply`,
    which leaves ``usage`` None where it was not valid)."""
    meters = [m for m in (_METER.get(), _RUN_METER.get()) if m is not None]
    if not meters:
        return
    usage = _get(response, "usage")
    counts = usage_counts(usage) if usage is not None else {"requests": 1, "unreported_requests": 1}
    for meter in meters:
        meter.add(role, counts)


def unreported(usage: RoleUsage | None) -> int:
    """Requests of a usage dict (per role) whose replies carried no valid usage."""
    return sum(c.get("unreported_requests", 0) for c in (usage or {}).values())


def merge(usages: list[RoleUsage | None]) -> RoleUsage:
    """Sum record usage dicts role by role."""
    meter = UsageMeter()
    for u in usages:
        for role, counts in (u or {}).items():
            meter.add(role, counts)
    return meter.to_dict()


def total_tokens(usage: RoleUsage | None) -> int:
    return sum(c.get("prompt_tokens", 0) + c.get("completion_tokens", 0) for c in (usage or {}).values())


#: The roles whose tokens an episode costs the system under test; the judge's are the evaluation's.
SYSTEM_ROLES = ("model", "vsearcher", "summary")


def system_tokens(usage: RoleUsage | None) -> int:
    """The tokens of one episode as ``compare``, the leaderboard and the report count them ("tokens per
    episode"): the model's, the vSearcher's and Insight-V's summary agent's prompt + completion tokens, the judge's
    left out."""
    return total_tokens({r: c for r, c in (usage or {}).items() if r in SYSTEM_ROLES})


class PriceError(ValueError):
    """An unusable price file; the message names the file and the field."""


@dataclass(frozen=True)
class Price:
    input: float
    output: float


def load_prices(path: str) -> dict[str, Price]:
    """``{model: Price}`` from a YAML or JSON file (per million tokens, US dollars)."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise PriceError(f"{path}: cannot read the price file ({e.strerror or e})") from None
    try:
        if path.endswith(".json"):
            data = json.loads(text)
        else:
            import yaml  # declared dependency (pyyaml)

            data = yaml.safe_load(text)
    except Exception as e:  # noqa: BLE001 - any parse error is a bad file
        raise PriceError(f"{path}: not valid {'JSON' if path.endswith('.json') else 'YAML'} ({e})") from None
    if not isinstance(data, dict):
        raise PriceError(f"{path}: expected a mapping of model name -> {{input, output}} prices per million tokens")
    prices = {}
    for model, p in data.items():
        if not isinstance(p, dict):
            raise PriceError(f"{path}: model '{model}': expected {{input: <$/M tokens>, output: <$/M tokens>}}")
        vals: dict[str, float] = {}
        for name in ("input", "output"):
            v = p.get(name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
                raise PriceError(f"{path}: model '{model}': field '{name}' must be a non-negative number, got {v!r}")
            vals[name] = float(v)
        prices[str(model)] = Price(**vals)
    return prices


class CostModel:
    """The cost of a record's usage given the model name per role key."""

    def __init__(self, prices: dict[str, Price], models: dict[str, str | None]):
        self.prices = prices
        self.models = {k: m for k, m in models.items() if m}
        missing = [f"{role}={m}" for role, m in self.models.items() if m not in prices]
        if missing:
            raise PriceError(
                f"no price for {', '.join(missing)} in the price file "
                f"(it lists: {', '.join(sorted(prices)) or 'nothing'})"
            )

    def cost(self, usage: dict | None) -> float:
        total = 0.0
        for role, c in (usage or {}).items():
            p = self.prices.get(self.models.get(role, ""))
            if p is None:
                continue
            total += (c.get("prompt_tokens", 0) * p.input + c.get("completion_tokens", 0) * p.output) / 1e6
        return total

    @classmethod
    def from_file(cls, path: str | None, models: dict[str, str | None]) -> CostModel | None:
        if not path:
            return None
        if not os.path.isfile(path):
            raise PriceError(f"{path}: price file not found")
        try:
            return cls(load_prices(path), models)
        except PriceError as e:
            msg = str(e)
            raise PriceError(msg if msg.startswith(path) else f"{path}: {msg}") from None
