#!/usr/bin/env bash
# The wheel a user installs works outside the repository (.ci/run runs this):
#   1. build the wheel of this checkout (no dependencies, no editable install);
#   2. install it into a fresh venv (dependencies from constraints/light.txt);
#   3. from a directory outside the repository, run every insight-o3-* console script with --help
#      (the list comes from the wheel's own entry points) and make a small demo benchmark with
#      insight-o3-make-demo-bench, then check its metadata file; run the keyless demo (insight-o3-demo) and
#      check that its report holds every sample; check that the README's example scripts are installed; run the
#      offline benchmark build (insight-o3-build-o3-bench-demo) and check its release.
#
#   bash scripts/check_wheel.sh          # uses $PYTHON (default python3) for the fresh venv
# Environment: PYTHON, WORK (scratch directory, default: a new mktemp -d, removed at the end).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
export PIP_DISABLE_PIP_VERSION_CHECK=1
WORK="${WORK:-$(mktemp -d)}"
trap 'rm -rf "$WORK"' EXIT
log() { printf '[wheel] %s\n' "$*"; }

log "building the wheel of $ROOT"
"$PYTHON" -m venv "$WORK/venv"
PY="$WORK/venv/bin/python"
"$PY" -m pip install -q "setuptools>=68" wheel
. "$ROOT/scripts/in_tree_build.sh"   # .ci/run builds the wheel while setup.sh makes editable installs of $ROOT
in_tree_build "$PY" -m pip wheel -q --no-deps --no-build-isolation -w "$WORK/dist" "$ROOT"
WHEEL="$(ls "$WORK"/dist/insight_o3-*.whl)"
log "installing $(basename "$WHEEL") into a fresh venv"
"$PY" -m pip install -q -c "$ROOT/constraints/light.txt" "$WHEEL"

mkdir -p "$WORK/outside"
cd "$WORK/outside"   # nothing of the checkout on sys.path from here on
"$PY" - <<'EOF'
import insight_o3, sys
assert "site-packages" in insight_o3.__file__, f"imported from the checkout: {insight_o3.__file__}"
bad = [m for m in ("torch", "transformers", "vllm", "verl", "tests") if m in sys.modules]
assert not bad, bad
EOF
SCRIPTS="$("$PY" - <<'EOF'
from importlib.metadata import distribution
eps = distribution("insight-o3").entry_points
print(" ".join(sorted(ep.name for ep in eps if ep.group == "console_scripts")))
EOF
)"
[ -n "$SCRIPTS" ] || { echo "the wheel declares no console scripts" >&2; exit 1; }
for s in $SCRIPTS; do
  "$WORK/venv/bin/$s" --help > "$WORK/help.txt" || { echo "$s --help failed" >&2; exit 1; }
  grep -q "usage:" "$WORK/help.txt" || { echo "$s --help printed no usage" >&2; exit 1; }
  log "$s --help ok"
done
"$WORK/venv/bin/insight-o3-make-demo-bench" --output_dir demo --num_images 2 --questions_per_image 2 \
  --size 640x480 > /dev/null 2>&1 || { echo "insight-o3-make-demo-bench failed" >&2; exit 1; }
"$PY" - <<'EOF'
import json, pathlib
rows = [json.loads(l) for l in pathlib.Path("demo/metadata.jsonl").read_text().splitlines()]
assert len(rows) == 4, rows
for r in rows:
    assert (pathlib.Path("demo") / r["file_name"]).is_file(), r
print(f"[wheel] insight-o3-make-demo-bench ok: {len(rows)} questions")
EOF
"$WORK/venv/bin/insight-o3-demo" --output_dir keyless --num_images 2 > "$WORK/demo.txt" 2>&1 \
  || { cat "$WORK/demo.txt" >&2; echo "insight-o3-demo failed" >&2; exit 1; }
"$PY" - <<'EOF'
import json, pathlib
from importlib.resources import files
rows = [json.loads(l) for l in pathlib.Path("keyless/bench/metadata.jsonl").read_text().splitlines()]
page = pathlib.Path("keyless/report.html").read_text()
missing = [r["question_id"] for r in rows if r["question_id"] not in page]
assert rows and not missing, missing
from importlib.metadata import distribution
lic = [f for f in distribution("insight-o3").files if f.name == "LICENSE"]
assert lic and "Apache License" in lic[0].read_text(), "the wheel lacks the LICENSE file"
examples = files("insight_o3") / "scripts" / "examples"
assert any(p.name.endswith(".sh") for p in examples.iterdir()), "the example scripts are not installed"
print(f"[wheel] insight-o3-demo ok: {len(rows)} samples in its report; example scripts and LICENSE installed")
EOF
"$WORK/venv/bin/insight-o3-build-o3-bench-demo" --output_dir build_demo --num_images 2 --min_side 800 \
  > "$WORK/build_demo.txt" 2>&1 || { cat "$WORK/build_demo.txt" >&2; echo "insight-o3-build-o3-bench-demo failed" >&2; exit 1; }
"$PY" - <<'EOF'
import json, pathlib
rel = pathlib.Path("build_demo/workspace/release")
rows = [json.loads(l) for l in (rel / "metadata.jsonl").read_text().splitlines()]
assert rows and all((rel / r["file_name"]).is_file() for r in rows), rows
print(f"[wheel] insight-o3-build-o3-bench-demo ok: {len(rows)} questions released")
EOF
log "ok: $(echo $SCRIPTS | wc -w) console scripts, the demo benchmark, the offline build, from $(basename "$WHEEL")"
