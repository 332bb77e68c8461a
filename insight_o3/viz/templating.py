"""The one Jinja2 environment of the HTML views (templates in ``viz/templates/``, shipped as package data).

Autoescape is on and undefined names raise. Every ``{{ value }}`` is escaped with :func:`html.escape`
(``&#x27;``/``&quot;`` entities, as the views always wrote) through ``finalize``; values that are already
:class:`markupsafe.Markup` (pre-rendered tables, SVG charts, nested views) pass through unchanged, so
the only way to put raw markup into a page is to wrap it in ``Markup`` in Python, explicitly.
"""

from __future__ import annotations

import html
from functools import lru_cache
from typing import Any

import jinja2
from markupsafe import Markup


def _escape(value: Any) -> Any:
    if hasattr(value, "__html__"):
        return value
    return Markup(html.escape(str(value), quote=True))


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.PackageLoader("insight_o3.viz", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        finalize=_escape,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=False,
    )


def render(name: str, **context: Any) -> Markup:
    """Render template ``name`` with ``context``; the result is safe markup."""
    return Markup(environment().get_template(name).render(**context))
