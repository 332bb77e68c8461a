"""The HTML report rendered by headless Chromium from a file:// URL (no server, no network):
the DOM after scripts ran has the per-category table and samples with decoded crop images, the
filter buttons work, and a screenshot shows a rendered page."""

from __future__ import annotations

import re
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
from PIL import Image

from insight_o3.viz.report import write_report
from tests.conftest import require_executable

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
    "--disable-extensions",
    "--no-default-browser-check",
    "--mute-audio",
    # any network access would fail: the page must not need it
    "--proxy-server=127.0.0.1:9",
    "--host-resolver-rules=MAP * ~NOTFOUND",
]

# Appended to a copy of the report: record how each image decoded and exercise the filter buttons.
PROBE = """<script>
window.addEventListener('load', function(){
  document.querySelectorAll('img').forEach(function(im){ im.setAttribute('data-natural', im.naturalWidth + 'x' + im.naturalHeight); });
  var b = document.querySelector(".filters button[data-kind='status'][data-value='failed']");
  if (b) { b.click(); }
  var shown = Array.prototype.filter.call(document.querySelectorAll('.sample'), function(e){ return e.style.display !== 'none'; });
  document.body.setAttribute('data-after-failed-filter', shown.map(function(e){ return e.dataset.status; }).join(','));
});
</script>"""


def _chromium(chromium: str, profile: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [chromium, *FLAGS, f"--user-data-dir={profile}", *args], capture_output=True, text=True, timeout=90
    )


class _Collect(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self.imgs: list[dict] = []
        self.samples: list[dict] = []
        self._table = None
        self._row = None
        self._cell = None
        self.body: dict = {}

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "body":
            self.body = a
        if tag == "table" and a.get("id"):
            self._table = self.tables.setdefault(a["id"], [])
        elif tag == "tr" and self._table is not None:
            self._row = []
            self._table.append(self._row)
        elif tag in ("td", "th") and self._row is not None:
            self._cell = ""
        elif tag == "img":
            self.imgs.append(a)
        elif tag == "details" and "sample" in (a.get("class") or "").split():
            self.samples.append(a)

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None and self._row is not None:
            self._row.append(self._cell.strip())
            self._cell = None
        elif tag == "table":
            self._table = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell += data


def test_report_renders_in_headless_chromium(demo_eval_run, tmp_path):
    chromium = require_executable("chromium")
    report = write_report(demo_eval_run.eval_dir, tmp_path / "report.html", thumb_px=256)
    probed = tmp_path / "probed.html"
    probed.write_text(report.read_text().replace("</body>", PROBE + "</body>"))

    res = _chromium(chromium, tmp_path / "profile", "--virtual-time-budget=5000", "--dump-dom", probed.as_uri())
    assert res.returncode == 0, res.stderr[-2000:]
    dom = _Collect()
    dom.feed(res.stdout)

    # per-category table: one row per category plus overall, accuracies as in the run's metrics
    table = dom.tables["category-table"]
    rows = {r[0]: r[1:] for r in table[1:]}
    assert set(rows) == {"chart", "map", "overall"}
    assert all(float(v) == 50.0 for v in rows["overall"][1:3])  # trial_0, trial_1 columns
    assert "failure-table" in dom.tables
    # samples: all four listed; at least one shows a crop the vReasoner saw, decoded by the browser
    assert len(dom.samples) == 4
    crops = [i for i in dom.imgs if "crop-img" in (i.get("class") or "")]
    assert crops and all(i["src"].startswith("data:image/jpeg;base64,") for i in crops)
    decoded = [i for i in dom.imgs if re.fullmatch(r"[1-9]\d*x[1-9]\d*", i.get("data-natural", ""))]
    assert len(decoded) == len(dom.imgs) >= 3, [i.get("data-natural") for i in dom.imgs]
    assert any(i.get("alt", "").startswith("crop 1 [") for i in crops)
    # the inline JS ran: the "failed" filter leaves only the failed sample visible
    assert dom.body.get("data-after-failed-filter") == "failed"

    shot = tmp_path / "shot.png"
    res = _chromium(
        chromium,
        tmp_path / "profile2",
        "--window-size=1200,2400",
        "--hide-scrollbars",
        f"--screenshot={shot}",
        report.as_uri(),
    )
    assert res.returncode == 0 and shot.is_file(), res.stderr[-2000:]
    px = np.asarray(Image.open(shot).convert("RGB"))
    assert px.shape[:2] == (2400, 1200)
    assert len(np.unique(px.reshape(-1, 3)[::97], axis=0)) > 50  # charts, badges and images, not a blank page
    badge_green = ((px[..., 0] < 80) & (px[..., 1] > 130) & (px[..., 2] < 120)).sum()
    assert badge_green > 100  # the "correct" status badges rendered
