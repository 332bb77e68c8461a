"""The O3-Bench review page in headless Chromium from a file:// URL (no server, no network): every item's image
decodes, the decision controls work, "Export decisions" writes the decisions file, and that file, applied by
``review apply``'s reader, gives the decisions that were clicked (an edit re-validated on the way)."""

from __future__ import annotations

import json
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
from PIL import Image

from insight_o3.o3bench import review
from insight_o3.o3bench.records import read_items, read_sources
from insight_o3.scripts import build_o3_bench
from tests.support.chromium import FLAGS
from tests.support.o3bench_oracle import Oracle, demo_inputs
from tests.support.o3bench_run import sources_argv, step_argv
from tests.support.stacks import require_executable

# Appended to a copy of the page: decide the first three items, export, keep what the page wrote.
PROBE = """<script>
window.addEventListener('load', function(){
  document.querySelectorAll('img').forEach(function(im){ im.setAttribute('data-natural', im.naturalWidth + 'x' + im.naturalHeight); });
  var items = document.querySelectorAll('.item');
  function pick(item, v){ var r = item.querySelector(".decide input[value='" + v + "']"); r.checked = true; r.dispatchEvent(new Event('change')); }
  pick(items[0], 'accept');
  pick(items[1], 'reject'); items[1].querySelector('.reason').value = 'two   options\\n are the same';
  pick(items[2], 'edit');
  var ans = items[2].querySelector('.f-answer'); ans.value = ans.value === 'F' ? 'E' : 'F';
  items[2].querySelector('.f-target_layouts').value = '%TARGETS%';
  pick(items[3], 'reject');  /* no reason: stays pending with a note */
  document.getElementById('export-button').click();
  document.body.setAttribute('data-decisions', document.getElementById('decisions-out').value);
  document.body.setAttribute('data-note', document.getElementById('export-note').textContent);
  document.body.setAttribute('data-choice-1', items[1].getAttribute('data-choice'));
});
</script>"""


class _Dom(HTMLParser):
    def __init__(self):
        super().__init__()
        self.body: dict = {}
        self.imgs: list[dict] = []

    def handle_starttag(self, tag, attrs):
        if tag == "body":
            self.body = dict(attrs)
        elif tag == "img":
            self.imgs.append(dict(attrs))


def _chromium(chromium: str, profile: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [chromium, *FLAGS, f"--user-data-dir={profile}", *args], capture_output=True, text=True, timeout=120
    )


def test_review_page_in_headless_chromium(tmp_path, openai_server):
    chromium = require_executable("chromium")
    inp = demo_inputs(tmp_path / "demo", num_images=5, questions=4, min_side=800)
    oracle = Oracle(inp["records"], inp["demo"])
    srv = openai_server(oracle.script())
    ws = tmp_path / "ws"
    assert build_o3_bench.main(sources_argv(ws, inp)) == 0
    for step in ("extract", "synthesize"):
        assert build_o3_bench.main(step_argv(step, ws, srv.base_url)) == 0
    assert build_o3_bench.main(["validate", "--output_dir", str(ws)]) == 0
    assert build_o3_bench.main(step_argv("filter", ws, srv.base_url)) == 0
    assert build_o3_bench.main(["review", "page", "--output_dir", str(ws), "--max_px", "640"]) == 0
    kept = read_items(ws / "filter" / "kept.jsonl")
    assert len(kept) >= 4, "the demo should leave at least four items for review"
    sources = read_sources(ws / "sources.jsonl")
    page = ws / "review" / "batch_001.html"
    html = page.read_text()
    assert "<script src" not in html and "<link" not in html  # self-contained

    third = kept[2]
    targets = sorted(sources[third.image_key].layout_ids)[:2]
    probed = tmp_path / "probed.html"
    probed.write_text(html.replace("</body>", PROBE.replace("%TARGETS%", f"{targets[0]}, {targets[1]}") + "</body>"))
    res = _chromium(chromium, tmp_path / "p1", "--virtual-time-budget=5000", "--dump-dom", probed.as_uri())
    assert res.returncode == 0, res.stderr[-2000:]
    dom = _Dom()
    dom.feed(res.stdout)

    # every item's image decoded in the browser (inline JPEG, layouts drawn)
    assert len(dom.imgs) == len(kept) and all(i["src"].startswith("data:image/jpeg;base64,") for i in dom.imgs)
    assert all(i.get("data-natural", "0x0") != "0x0" for i in dom.imgs), [i.get("data-natural") for i in dom.imgs]
    assert dom.body["data-choice-1"] == "reject"
    assert "left pending" in dom.body["data-note"] and kept[3].item_id in dom.body["data-note"]

    # the exported text is a decisions file that review apply reads
    exported = dom.body["data-decisions"]
    dec_file = tmp_path / "exported.decisions.txt"
    dec_file.write_text(exported)
    decisions, problems = review.read_decisions([str(dec_file)])
    assert problems == [] and len(decisions) == len(kept)
    rows = {r["item_id"]: r for r in review.apply(kept, sources, decisions)}
    assert rows[kept[0].item_id]["decision"] == "accept"
    assert (
        rows[kept[1].item_id]["decision"] == "reject" and rows[kept[1].item_id]["reason"] == "two options are the same"
    )
    edited = rows[third.item_id]
    assert edited["decision"] == "edit"
    assert edited["item"]["answer"] == ("E" if third.answer == "F" else "F")
    assert edited["item"]["target_layouts"] == targets and edited["item"]["question"] == third.question
    edit_line = next(ln for ln in exported.splitlines() if ln.startswith(third.item_id))
    assert set(json.loads(edit_line.split(" edit ", 1)[1])) == {"answer", "target_layouts"}  # only what changed
    assert all(rows[k.item_id]["decision"] == "pending" for k in kept[3:])
    assert exported.splitlines()[0].startswith("# O3-Bench review decisions, batch 1 of 1")

    shot = tmp_path / "shot.png"
    res = _chromium(
        chromium, tmp_path / "p2", "--window-size=1200,1600", "--hide-scrollbars", f"--screenshot={shot}", page.as_uri()
    )
    assert res.returncode == 0 and shot.is_file(), res.stderr[-2000:]
    px = np.asarray(Image.open(shot).convert("RGB"))
    red = ((px[..., 0] > 200) & (px[..., 1] < 80) & (px[..., 2] < 80)).sum()
    assert red > 200  # the target layouts are drawn in red
    assert len(np.unique(px.reshape(-1, 3)[::97], axis=0)) > 50
