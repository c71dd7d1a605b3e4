#!/usr/bin/env bash
# One build for everything: scripts/test (lints, tests, doc tests, e2e
# harnesses) and scripts/demo compile with the same profile, the same
# features and the same compiler flags, so whichever runs first leaves
# nothing for the other to compile.
#
# - clippy's lints run *inside* the build: clippy-driver is the compiler of
#   the workspace's own crates (RUSTC_WORKSPACE_WRAPPER, exactly what `cargo
#   clippy` sets up, but for a real build instead of a check-only one), so
#   the dependency graph is compiled once, not once for clippy and once for
#   the tests;
# - features are unified across the workspace by the `workspace-hack` crate
#   (cargo-hakari), so `cargo build -p overtime` resolves the same features
#   as `cargo nextest run --workspace`.
#
# Sourced by scripts/test and scripts/demo; run directly to rerun one step:
#   scripts/lib/build.sh --all-targets      # build every target, lints on
#   scripts/lib/build.sh --check-reuse      # cargo build -p overtime must compile nothing
#   scripts/lib/build.sh ARGS...            # cargo ARGS... in this environment
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/overtime-target}
export CARGO_TERM_COLOR=${CARGO_TERM_COLOR:-always}
# No incremental caches for the workspace's crates: they held 7 GB of a
# 15 GB target dir and slow a cold build down; a change to one crate still
# recompiles only that crate and those above it.
export CARGO_INCREMENTAL=${CARGO_INCREMENTAL:-0}

overtime_cargo() {
    local driver
    driver=$(command -v clippy-driver) || { echo "clippy-driver is missing: rustup component add clippy" >&2; return 1; }
    RUSTC_WORKSPACE_WRAPPER=$driver \
        CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__" \
        cargo "$@"
}

# Every target of every crate (libs, bins, tests, benches, examples), lints
# as errors.
overtime_build() { overtime_cargo build --workspace "$@"; }

# After a full build, the demo's build must compile nothing.
overtime_check_reuse() {
    local out
    out=$(CARGO_TERM_COLOR=never overtime_cargo build -p overtime 2>&1) || { echo "$out"; return 1; }
    if grep -E '^\s*Compiling ' <<<"$out"; then
        echo "cargo build -p overtime recompiled the crates above after a full build:" >&2
        echo "their features or flags differ between the demo's build and the tests' (see scripts/lib/build.sh)" >&2
        return 1
    fi
    echo "cargo build -p overtime: nothing to compile"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    set -euo pipefail
    cd "$(dirname "$0")/../.."
    case "${1:-}" in
        --all-targets) overtime_build --all-targets ;;
        --check-reuse) overtime_check_reuse ;;
        "") echo "usage: scripts/lib/build.sh --all-targets | --check-reuse | CARGO-ARGS..." >&2; exit 2 ;;
        *) overtime_cargo "$@" ;;
    esac
fi
