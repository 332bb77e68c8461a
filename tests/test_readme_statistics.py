"""The README's statistics figures are measured ones: its table is ``scripts/stats_audit.py``'s rendering of the
stored audit (``docs/stats_audit.json``), and the audit supports what the README says of the methods."""

from __future__ import annotations

import importlib.util
import json

from tests.support.stacks import REPO


def _audit_module():
    spec = importlib.util.spec_from_file_location("stats_audit", REPO / "scripts" / "stats_audit.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_readme_table_is_the_audits_output():
    mod = _audit_module()
    audit = json.loads((REPO / "docs" / "stats_audit.json").read_text())
    readme = (REPO / "README.md").read_text()
    block = readme[readme.index(mod.MARK_BEGIN) + len(mod.MARK_BEGIN) : readme.index(mod.MARK_END)]
    assert block.strip() == mod.markdown(audit).strip()


def test_the_audit_supports_the_readmes_claims():
    audit = json.loads((REPO / "docs" / "stats_audit.json").read_text())
    rows = audit["clustered"]
    assert audit["replicates"] >= 2000
    # the test over images holds its level; over samples it does not where images correlate
    assert all(r["type1_images"] <= 0.07 for r in rows)
    assert max(r["type1_samples"] for r in rows if r["images"] == 204) > 0.07
    # the difference's interval covers at 10 samples and more, in both models; over samples it does not
    assert all(r["cover_diff_images"] >= 0.93 for r in rows)
    assert min(r["cover_diff_samples"] for r in rows if r["images"] == 204) < 0.93
    assert audit["added_misses"]["exact_min"] >= 0.93 and min(audit["added_misses"]["simulated"].values()) >= 0.93
    assert all(r["cover_acc_images"] >= 0.93 for r in rows)
    assert all(r["cover_diff"] >= 0.93 for r in audit["small_n"] if r["samples"] >= 10)
    # the bootstrap is flagged below 40 clusters: there it covers less than the interval
    assert all(r["cover_bootstrap"] < 0.93 for r in rows if r["images"] < 40 and r["trials"] == 1)
