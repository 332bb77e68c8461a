"""A run's budget: the tokens and dollars it may spend (``max_tokens_total`` / ``max_cost``) and the stop that
reaching one of them is (:class:`BudgetExceeded`)."""

from __future__ import annotations

from ..endpoints.guard import RunStopped


class BudgetExceeded(RunStopped):
    """``--max_cost`` / ``--max_tokens_total`` reached: no new work started, work in flight recorded."""

    resume_hint = None  # not "rerun the same command": the same budget stops again (``str()`` says what to do)

    def __init__(self, what: str, used: float, limit: float):
        super().__init__(what, used, limit)
        self.what, self.used, self.limit = what, used, limit

    def __str__(self) -> str:
        flag = "--max_cost" if self.what == "cost" else "--max_tokens_total"
        used = f"${self.used:.4f}" if self.what == "cost" else f"{int(self.used)} tokens"
        return (
            f"budget reached: {used} used, {flag} {self.limit:g}; stopped starting new samples "
            f"(rerun with a higher {flag} to resume)"
        )


class Budget:
    """Tokens and dollars spent against the limits (None: no limit); trips once, on the first limit reached."""

    def __init__(self, max_cost: float | None = None, max_tokens_total: int | None = None):
        self.max_cost, self.max_tokens_total = max_cost, max_tokens_total
        self.tokens, self.cost = 0, 0.0
        self.exceeded: BudgetExceeded | None = None

    def charge(self, tokens: int = 0, cost: float = 0.0) -> None:
        self.tokens += tokens
        self.cost += cost
        if self.exceeded is not None:
            return
        if self.max_cost is not None and self.cost >= self.max_cost:
            self.exceeded = BudgetExceeded("cost", self.cost, self.max_cost)
        elif self.max_tokens_total is not None and self.tokens >= self.max_tokens_total:
            self.exceeded = BudgetExceeded("tokens", self.tokens, self.max_tokens_total)
