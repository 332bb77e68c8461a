#!/usr/bin/env bash
# Time the README's quick start as a newcomer runs it: `git clone` -> `bash scripts/setup.sh --light` -> the demo,
# in a scratch directory, with a new, empty pip cache. Prints wall and CPU seconds (user+sys) per step and the
# load average before and after (a shared machine stretches wall time; CPU time is what the steps cost).
#
#   bash scripts/bench_newcomer.sh            # pip as configured on this machine (local indexes, find-links)
#   bash scripts/bench_newcomer.sh --pypi     # PyPI only: no pip configuration file, no find-links
#
# Environment: REPO (what to clone; default: this checkout), WORK (scratch directory; default: a new temporary
# one, removed afterwards unless KEEP=1).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MODE=configured
for a in "$@"; do
  case "$a" in
    --pypi) MODE=pypi ;;
    -h|--help) sed -n 2,10p "$0"; exit 0 ;;
    *) echo "bench_newcomer.sh: unknown argument $a" >&2; exit 2 ;;
  esac
done
REPO="${REPO:-$ROOT}"
WORK="${WORK:-$(mktemp -d)}"
trap '[ "${KEEP:-0}" = 1 ] || rm -rf "$WORK"' EXIT
mkdir -p "$WORK/pip-cache"
export PIP_CACHE_DIR="$WORK/pip-cache"   # cold: a new, empty cache
if [ "$MODE" = pypi ]; then
  export PIP_CONFIG_FILE=/dev/null        # pip reads no configuration file (no local index, no find-links)
  unset PIP_FIND_LINKS PIP_EXTRA_INDEX_URL PIP_INDEX_URL
fi
load() { cut -d' ' -f1-3 /proc/loadavg; }
# CPU seconds of a whole step (its children included), measured by bash's `times` in a subshell
cpu_of() { ( "$@" > /dev/null 2>&1; times ) | tail -1 | awk '{split($1,u,"m"); split($2,s,"m"); sub("s","",u[2]); sub("s","",s[2]); printf "%.1f", u[1]*60+u[2]+s[1]*60+s[2]}'; }
echo "newcomer path ($MODE pip, empty cache $PIP_CACHE_DIR), $(nproc) cores, load average before: $(load)"
T0=$(date +%s.%N)
t=$(date +%s.%N); c=$(cpu_of git clone -q "$REPO" "$WORK/repo"); printf 'clone  wall %6.1f s  cpu %s s\n' "$(echo "$(date +%s.%N) - $t" | bc)" "$c"
cd "$WORK/repo"
t=$(date +%s.%N); c=$(cpu_of bash scripts/setup.sh --light); printf 'setup  wall %6.1f s  cpu %s s\n' "$(echo "$(date +%s.%N) - $t" | bc)" "$c"
[ -f .venv/.insight_o3_lock ] || { KEEP=1; echo "bench_newcomer.sh: the light setup failed (rerun it in $WORK/repo to see why)" >&2; exit 1; }
t=$(date +%s.%N); c=$(cpu_of bash -c 'source .venv/bin/activate && python -m insight_o3.scripts.demo'); printf 'demo   wall %6.1f s  cpu %s s\n' "$(echo "$(date +%s.%N) - $t" | bc)" "$c"
[ -f outputs/demo/report.html ] || { KEEP=1; echo "bench_newcomer.sh: the demo wrote no report in $WORK/repo" >&2; exit 1; }
printf 'total  wall %6.1f s; load average after: %s; pip cache afterwards: %s\n' "$(echo "$(date +%s.%N) - $T0" | bc)" "$(load)" "$(du -sh "$PIP_CACHE_DIR" | cut -f1)"
