#!/usr/bin/env bash
# scripts/test --repeat N: the whole suite (scripts/test, as CI runs it) N
# times in a row, with a CPU load on every core beside it the whole time —
# a shared CI runner or a developer's busy laptop, on purpose. Green once
# is not the bar; green every time on a busy machine is. Not part of the
# default run.
#
# The load is `stress-ng --cpu <cores>` (Debian's stress-ng, installed when
# missing and apt can), else one busy shell loop per core. Each run's
# result and time are printed as it ends and again in a summary; each
# run's output is kept in a log. Exit 1 if any run failed.
#
#   scripts/test --repeat 3
set -uo pipefail
cd "$(dirname "$0")/../.."

n=${1:-}
if ! [[ "$n" =~ ^[1-9][0-9]*$ ]]; then
    echo "usage: scripts/test --repeat N   (N >= 1: the whole suite N times, under load)" >&2
    exit 2
fi
cores=$(nproc 2>/dev/null || echo 2)
logs=$(mktemp -d "${TMPDIR:-/tmp}/overtime-repeat.XXXXXX")
mmss() { printf '%d:%02d' $(($1 / 60)) $(($1 % 60)); }

# ---- the load beside the suite
if ! command -v stress-ng >/dev/null; then
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    if [ "$(id -u)" -eq 0 ] || command -v sudo >/dev/null; then
        { $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
            $sudo apt-get install -y -qq --no-install-recommends stress-ng; } >"$logs/apt.log" 2>&1 \
            || echo "stress-ng could not be installed (see $logs/apt.log): busy loops instead"
    fi
fi
load_pids=()
stop_load() {
    for p in "${load_pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${load_pids[@]}"; do wait "$p" 2>/dev/null || true; done
    load_pids=()
}
trap stop_load EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
if command -v stress-ng >/dev/null; then
    load="stress-ng --cpu $cores (every core busy)"
    stress-ng --cpu "$cores" --quiet >"$logs/stress-ng.log" 2>&1 &
    load_pids+=($!)
else
    load="$cores busy shell loops (one per core)"
    for _ in $(seq "$cores"); do
        (while :; do :; done) &
        load_pids+=($!)
    done
fi
printf '\033[1m==> scripts/test, %s times in a row, beside %s\033[0m (logs in %s)\n' "$n" "$load" "$logs"

# ---- the runs
results=()
failed=0
for i in $(seq "$n"); do
    printf '\n\033[1m==> run %s of %s  [%s]\033[0m\n' "$i" "$n" "$(date +%H:%M:%S)"
    t0=$SECONDS
    rc=0
    bash scripts/test 2>&1 | tee "$logs/run-$i.log" || rc=$?
    took=$(mmss $((SECONDS - t0)))
    if [ "$rc" -eq 0 ]; then
        results+=("$(printf '  run %s: ok      %7s' "$i" "$took")")
    else
        failed=$((failed + 1))
        steps=$(grep -aE '^  FAILED ' "$logs/run-$i.log" | sed -E 's/\x1b\[[0-9;]*m//g; s/^  FAILED +[0-9:]+ +//' | paste -sd ';' -)
        results+=("$(printf '  run %s: FAILED  %7s  %s (log: %s)' "$i" "$took" "${steps:-see the log}" "$logs/run-$i.log")")
    fi
    printf '%s\n' "${results[-1]}"
done
stop_load

printf '\n\033[1m==> scripts/test --repeat %s beside %s\033[0m\n' "$n" "$load"
printf '%s\n' "${results[@]}"
if [ "$failed" -gt 0 ]; then
    printf '\033[1;31m%d of %d runs failed\033[0m\n' "$failed" "$n"
    exit 1
fi
printf '\033[1;32mall %d runs passed\033[0m\n' "$n"
