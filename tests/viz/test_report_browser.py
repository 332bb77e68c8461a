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
from tests.support.chromium import FLAGS
from tests.support.stacks import require_executable

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
        "--window-size=1200,3200",  # tall enough for the sample list below the analysis sections
        "--hide-scrollbars",
        f"--screenshot={shot}",
        report.as_uri(),
    )
    assert res.returncode == 0 and shot.is_file(), res.stderr[-2000:]
    px = np.asarray(Image.open(shot).convert("RGB"))
    assert px.shape[:2] == (3200, 1200)
    assert len(np.unique(px.reshape(-1, 3)[::97], axis=0)) > 50  # charts, badges and images, not a blank page
    badge_green = ((px[..., 0] < 80) & (px[..., 1] > 130) & (px[..., 2] < 120)).sum()
    assert badge_green > 100  # the "correct" status badges rendered


# ------------------------------------------------------------------------------------------------- analysis
ANALYSIS_PROBE = """<script>
window.addEventListener('load', function(){
  var b = document.querySelector(".filters button[data-kind='bucket'][data-value='crop_missed']");
  if (b) { b.click(); }
  var shown = Array.prototype.filter.call(document.querySelectorAll('.sample'), function(e){ return e.style.display !== 'none'; });
  document.body.setAttribute('data-after-bucket-filter', shown.map(function(e){ return e.dataset.bucket; }).join(','));
});
</script>"""

FLIP_PROBE = """<script>
window.addEventListener('load', function(){
  var a = document.querySelector('table.flips a');
  document.body.setAttribute('data-flip-target', a ? a.getAttribute('href') : '');
  if (a) { a.click(); }
  setTimeout(function(){
    var el = a && document.getElementById(a.getAttribute('href').slice(1));
    document.body.setAttribute('data-flip-open', el && el.open ? 'yes' : 'no');
    document.body.setAttribute('data-flip-columns', el ? el.querySelectorAll('.compare-col').length : 0);
  }, 200);
});
</script>"""


def _dom(chromium: str, page: Path, probe: str, tmp_path: Path, name: str) -> _Collect:
    probed = tmp_path / f"{name}.probed.html"
    probed.write_text(page.read_text().replace("</body>", probe + "</body>"))
    res = _chromium(chromium, tmp_path / f"profile-{name}", "--virtual-time-budget=5000", "--dump-dom", probed.as_uri())
    assert res.returncode == 0, res.stderr[-2000:]
    dom = _Collect()
    dom.feed(res.stdout)
    return dom


def test_analysis_sections_render_in_headless_chromium(demo_eval_run, tmp_path, openai_server):
    """The report's attribution and judge-agreement sections and the compare page, as a browser shows
    them: tables in the DOM, the "Why" filter and a flip link that opens its side-by-side block."""
    from insight_o3.scripts import compare, rejudge
    from tests.support.openai_server import chat
    from tests.support.viz_run import make_demo_run

    chromium = require_executable("chromium")
    # another judge: says <correct> to every verification, so the wrong answers of question 1 flip
    lenient = openai_server(lambda req, call: chat("<correct>"))
    argv = [str(demo_eval_run.eval_dir), "--judge_model", "lenient-judge", "--judge_api_base_url", lenient.base_url]
    argv += ["--output_dir", str(tmp_path / "out"), "--eval_name", "lenient", "--no_progress"]
    argv += ["--agreement_out", str(tmp_path / "agreement.json")]
    assert rejudge.main(argv) == 1  # the source's lost episodes stay lost
    report = write_report(
        demo_eval_run.eval_dir, tmp_path / "report.html", thumb_px=200, judges=[tmp_path / "out" / "lenient"]
    )
    dom = _dom(chromium, report, ANALYSIS_PROBE, tmp_path, "report")
    by_trial = {r[0]: r[1:] for r in dom.tables["attribution-table"][1:]}
    header = dom.tables["attribution-table"][0][1:]
    assert set(by_trial) == {"trial_0", "trial_1"}
    cell = dict(zip(header, by_trial["trial_0"]))
    assert cell["correct"] == "2 (50%)" and cell["lost to API errors"] == "1 (25%)"
    assert cell["crop missed the evidence"] == "1 (25%)"  # question 1: one of its target layouts seen
    split = {r[0]: r[1:] for r in dom.tables["error-split-table"][1:]}
    assert split["trial_1"] == ["0 (0%)", "1 (100%)", "0 (0%)", "1"]  # vReasoner, vSearcher, unattributed, errors
    assert "attribution-category-table" in dom.tables and "crop-quality-table" in dom.tables
    # judge agreement: both judges per row, kappa per pair, question 1's two trials disagree
    judges = {r[0]: r[1:] for r in dom.tables["judges-table"][1:]}
    assert set(judges) == {"scripted-judge (verify)", "lenient-judge (verify)"}
    assert float(judges["scripted-judge (verify)"][0]) == 50.0 and float(judges["lenient-judge (verify)"][0]) == 75.0
    kappa = dom.tables["kappa-table"]
    assert kappa[1][0] == "scripted-judge (verify) vs lenient-judge (verify)" and kappa[1][1] == "6"
    dis = dom.tables["disagreement-table"][1:]
    assert len(dis) == 2 and {r[1] for r in dis} == {"0", "1"}
    assert dis[0][5:] == ["wrong<wrong>", "correct<correct>"]  # each verdict, with what the judge model said
    assert dom.body.get("data-after-bucket-filter") == "crop_missed"

    # the compare page: the same benchmark run by another (scripted) system
    other = make_demo_run(tmp_path / "other", variant="b", bench=demo_eval_run.bench_dir)
    page = tmp_path / "compare.html"
    assert (
        compare.main([str(demo_eval_run.eval_dir), str(other.eval_dir), "--out", str(page), "--n_resamples", "500"])
        == 0
    )
    dom = _dom(chromium, page, FLIP_PROBE, tmp_path, "compare")
    acc = {r[0]: r[1:] for r in dom.tables["compare-accuracy"][1:]}
    # the demo run lost one of its 4 samples to API errors (both trials): left out, 2 of 3 right
    # ... and with the lost items counted as wrong, beside it
    assert set(acc) == {"overall", "overall, lost items counted as wrong", "chart", "map"}
    assert acc["overall"][1].startswith("66.7 [") and acc["overall, lost items counted as wrong"][1].startswith(
        "50.0 ["
    )
    assert dom.tables["compare-runs"][1][6] == "2 / 1"  # items / samples lost
    assert len(dom.tables["compare-pairs"]) == 2 and "compare-attribution" in dom.tables
    flips = dom.tables["flip-table-0"][1:]
    assert len(flips) == 3 and {r[2] for r in flips} == {"fixed", "broken"}  # the lost sample is no flip
    assert dom.body.get("data-flip-target", "").startswith("#flip-0-")
    assert dom.body.get("data-flip-open") == "yes" and dom.body.get("data-flip-columns") == "2"
