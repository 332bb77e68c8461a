# Sourced by scripts/setup.sh and scripts/check_wheel.sh ($ROOT set). pip builds this checkout inside its tree
# ($ROOT/build, $ROOT/insight_o3.egg-info) for an editable install and for a wheel, so two such builds at once
# (setup.sh's venv jobs; .ci/run checks the wheel while setup.sh runs) would write the same files: they take turns.
in_tree_build() {  # in_tree_build COMMAND...: run COMMAND holding the checkout's build lock
  command -v flock >/dev/null || { echo "$0: needs flock (util-linux)" >&2; return 1; }
  mkdir -p "$ROOT/.venvs"
  flock "$ROOT/.venvs/.in-tree-build.lock" "$@"
}
