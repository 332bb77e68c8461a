"""The O3-Bench review page: one self-contained HTML file per batch of items (``build-o3-bench review page``).

Each item shows its image with every layout (grey, dashed, numbered) and its target layouts (red), the question,
options, answer and explanation, and each filter model's answers; the page's controls (accept / reject with a
reason / edit the fields / pending) export the decisions file that ``review apply`` reads
(:mod:`insight_o3.o3bench.review`). Images are embedded as JPEG ``data:`` URLs and the script is inline:
the page opens from a ``file://`` URL with no network.
"""

from __future__ import annotations

import json
import os
import time

from markupsafe import Markup

from ..base.json_types import JSONObject
from ..imaging.images import ImageError
from ..o3bench.records import BenchItem, SourceImage
from ..o3bench.review import template
from ..storage.atomic import write_text_atomic
from .draw import LAYOUT_COLOR, TARGET_COLOR, DrawBox, ImageResolver, draw_boxes, image_data_url, placeholder
from .templating import render

_SCRIPT = r"""
(function(){
  var HEADER = __HEADER__;
  function choice(item){ var r = item.querySelector('.decide input[type=radio]:checked'); return r ? r.value : 'pending'; }
  Array.prototype.forEach.call(document.querySelectorAll('.item'), function(item){
    Array.prototype.forEach.call(item.querySelectorAll('.decide input[type=radio]'), function(r){
      r.addEventListener('change', function(){
        var c = choice(item); item.setAttribute('data-choice', c); item.querySelector('.decide').setAttribute('data-choice', c);
      });
    });
  });
  function line(item){
    var id = item.getAttribute('data-item-id'), c = choice(item);
    if (c === 'accept') { return id + ' accept'; }
    if (c === 'reject') {
      var reason = item.querySelector('.reason').value.replace(/\s+/g, ' ').trim();
      return reason ? id + ' reject ' + reason : {error: id + ': a rejection needs a reason'};
    }
    if (c === 'edit') {
      var edit = {};
      ['question', 'options', 'answer', 'explanation'].forEach(function(f){
        var el = item.querySelector('.f-' + f);
        if (el.value !== el.defaultValue) { edit[f] = el.value; }
      });
      var t = item.querySelector('.f-target_layouts').value.trim();
      if (t) { edit.target_layouts = t.split(/[\s,]+/).filter(Boolean).map(Number); }
      return Object.keys(edit).length ? id + ' edit ' + JSON.stringify(edit) : {error: id + ': edit chosen but nothing changed'};
    }
    return id + ' pending';
  }
  document.getElementById('export-button').addEventListener('click', function(){
    var out = HEADER.slice(), errors = [];
    Array.prototype.forEach.call(document.querySelectorAll('.item'), function(item){
      var l = line(item);
      if (typeof l === 'string') { out.push(l); } else { errors.push(l.error); out.push(item.getAttribute('data-item-id') + ' pending'); }
    });
    var text = out.join('\n') + '\n';
    document.getElementById('decisions-out').value = text;
    var a = document.getElementById('download');
    a.href = URL.createObjectURL(new Blob([text], {type: 'text/plain'}));
    a.style.display = 'inline';
    document.getElementById('export-note').textContent =
      errors.length ? 'left pending: ' + errors.join('; ') : (out.length - HEADER.length) + ' decisions';
  });
})();
"""


def _model_rows(record: dict | None) -> tuple[list[JSONObject], int]:
    models = (record or {}).get("models") or {}
    rows = []
    for name, m in models.items():
        attempts = [
            {"answer": a.get("extracted_answer") or "-", "status": a.get("status") or "?"}
            for a in (m.get("attempts") or [])
        ]
        rows.append({"name": name, "attempts": attempts})
    return rows, sum(bool(m.get("solved")) for m in models.values())


def item_view(
    item: BenchItem, source: SourceImage, record: dict | None, resolver: ImageResolver, max_px: int
) -> JSONObject:
    """The template context of one item (its image drawn with the layouts, targets on top)."""
    boxes = [
        DrawBox(
            lay.bbox,
            str(lay.layout_id),
            TARGET_COLOR if lay.layout_id in item.target_layouts else LAYOUT_COLOR,
            dashed=lay.layout_id not in item.target_layouts,
        )
        for lay in source.layouts
    ]
    boxes.sort(key=lambda b: b.color == TARGET_COLOR)
    try:
        img = draw_boxes(resolver.open(source.image), boxes, max_px)
    except ImageError as e:
        img = placeholder(str(e))
    models, solved = _model_rows(record)
    targets = [f"{t} ({lay.label})" if (lay := source.layout(t)) is not None else str(t) for t in item.target_layouts]
    return {
        "item_id": item.item_id,
        "subset": item.subset,
        "origin": item.origin,
        "image_name": os.path.basename(source.image),
        "width": source.width,
        "height": source.height,
        "src": image_data_url(img),
        "targets": ", ".join(targets) or "none",
        "question": item.question,
        "options": item.options,
        "answer": item.answer,
        "explanation": item.explanation,
        "models": models,
        "n_solved": solved,
        "n_models": len(models),
    }


def render_review_page(
    items: list[BenchItem],
    sources: dict[str, SourceImage],
    filter_records: dict[str, dict],
    *,
    batch: int,
    n_batches: int,
    decisions_name: str,
    workspace: str = "",
    max_px: int = 1200,
) -> str:
    """The HTML of one batch."""
    resolver = ImageResolver(cache_size=2)
    views = [item_view(it, sources[it.image_key], filter_records.get(it.item_id), resolver, max_px) for it in items]
    page_name = decisions_name.replace(".decisions.txt", ".html")
    header = [ln for ln in template(items, batch, n_batches, page_name).splitlines() if ln.startswith("#")]
    script = _SCRIPT.replace("__HEADER__", json.dumps(header, ensure_ascii=False).replace("</", "<\\/"))
    return str(
        render(
            "o3bench_review.html.j2",
            title=f"O3-Bench review, batch {batch} of {n_batches}",
            items=views,
            n_items=len(items),
            n_images=len({it.image_key for it in items}),
            workspace=workspace,
            generated=time.strftime("%Y-%m-%d %H:%M"),
            decisions_name=decisions_name,
            script=Markup(script),
        )
    )


def write_review_page(path: str | os.PathLike, html: str) -> None:
    write_text_atomic(path, html)
