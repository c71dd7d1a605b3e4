#!/usr/bin/env python3
"""The accuracy scoreboard: no accuracy number falls unnoticed.

Every accuracy harness (tests/e2e/run.py, tests/e2e_otel/run.py, the
Node.js harness, scripts/check_truth.py over the fixtures, the rewrite
harness of overtime-diagnose) writes a score JSON:

    {"datasets": {"e2e/A": {"failing": 135, "with_verdict": 135,
        "kind_right": 135, "kind_component_right": 135, "outcome_right": 135,
        "findings_expected": 0, "findings_found": 0, "false_positives": 0}, ...}}

tests/scoreboard.toml holds the committed numbers of every dataset.

usage: scoreboard.py check  [--board TOML] [--complete] FILE...
       scoreboard.py update [--board TOML] [--allow-drop] FILE...
       scoreboard.py show   [--board TOML]

check   prints every measured dataset beside the board and exits 1 when any
        of with_verdict, kind_right, kind_component_right, outcome_right
        (over `failing`) or findings_found (over `findings_expected`) fell,
        or false_positives rose. A count is compared as a count when its
        denominator is unchanged, as a ratio otherwise. With --complete, a
        dataset on the board that no FILE measured also fails.
update  writes the measured numbers into the board (datasets not measured
        stay); refuses when a number fell, unless --allow-drop.
show    prints the board.
Exit 2: a FILE is unreadable or not a score JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tomllib

FIELDS = (
    "failing",
    "with_verdict",
    "kind_right",
    "kind_component_right",
    "outcome_right",
    "findings_expected",
    "findings_found",
    "false_positives",
)
# field → its denominator. These may not fall.
GUARDED = {
    "with_verdict": "failing",
    "kind_right": "failing",
    "kind_component_right": "failing",
    "outcome_right": "failing",
    "findings_found": "findings_expected",
}
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_BOARD = os.path.join(REPO, "tests", "scoreboard.toml")
HEADER = """\
# The accuracy scoreboard (docs/testing.md, *Scoreboard*): the numbers each
# accuracy harness reached, per dataset. `scripts/test` fails when one falls
# (`scripts/scoreboard.py check`); a commit that raises one records it here
# (`scripts/scoreboard.py update FILE...`, the score JSONs of its run).
#
# failing: failing requests in the truth; with_verdict: of them, with a
# failing verdict; kind_right / kind_component_right / outcome_right: with
# the right root-cause kind / kind and component / outcome;
# findings_expected / findings_found: findings the truth holds / found;
# false_positives: failing verdicts or incidents from healthy traffic.
"""


class ScoreError(Exception):
    """A score file that cannot be used."""


def validate(name: str, d: dict, where: str) -> dict:
    """The dataset's numbers, checked: every field, whole numbers, counts
    that fit inside their denominators."""
    if not isinstance(d, dict):
        raise ScoreError(f"{where}: dataset {name!r} is not an object")
    missing = [f for f in FIELDS if f not in d]
    if missing:
        raise ScoreError(f"{where}: dataset {name!r} lacks {', '.join(missing)}")
    out = {}
    for f in FIELDS:
        v = d[f]
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ScoreError(f"{where}: dataset {name!r}: {f} = {v!r} is not a count")
        out[f] = v
    for f, den in GUARDED.items():
        if out[f] > out[den]:
            raise ScoreError(f"{where}: dataset {name!r}: {f} = {out[f]} > {den} = {out[den]}")
    if out["kind_component_right"] > out["kind_right"]:
        raise ScoreError(f"{where}: dataset {name!r}: kind_component_right > kind_right")
    return out


def read_scores(paths: list[str]) -> dict[str, dict]:
    """Every dataset of the files; a dataset measured twice is an error."""
    seen: dict[str, str] = {}
    out: dict[str, dict] = {}
    for p in paths:
        try:
            with open(p) as f:
                doc = json.load(f)
        except (OSError, ValueError) as e:
            raise ScoreError(f"{p}: {e}") from e
        if not isinstance(doc, dict) or not isinstance(doc.get("datasets"), dict):
            raise ScoreError(f"{p}: not a score JSON (no \"datasets\" object)")
        for name, d in doc["datasets"].items():
            if name in seen:
                raise ScoreError(f"{p}: dataset {name!r} is also in {seen[name]}")
            seen[name] = p
            out[name] = validate(name, d, p)
    return out


def write_scores(path: str, datasets: dict[str, dict]) -> None:
    """Writes a score JSON (for the harnesses: checked as `check` reads it)."""
    checked = {n: validate(n, d, path) for n, d in datasets.items()}
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump({"datasets": checked}, f, indent=1, sort_keys=True)
        f.write("\n")


def empty() -> dict:
    """A dataset with every count 0, for a harness to fill in."""
    return dict.fromkeys(FIELDS, 0)


def read_board(path: str) -> dict[str, dict]:
    if not os.path.exists(path):
        return {}
    with open(path, "rb") as f:
        doc = tomllib.load(f)
    return {n: validate(n, d, path) for n, d in doc.items()}


def write_board(path: str, board: dict[str, dict]) -> None:
    lines = [HEADER]
    for name in sorted(board):
        lines.append(f"[{json.dumps(name)}]")
        lines.extend(f"{f} = {board[name][f]}" for f in FIELDS)
        lines.append("")
    with open(path, "w") as f:
        f.write("\n".join(lines))


def falls(old: dict, new: dict) -> list[str]:
    """What fell from `old` to `new`, in words."""
    out = []
    for f, den in GUARDED.items():
        if new[den] == old[den]:
            if new[f] < old[f]:
                out.append(f"{f} {old[f]} → {new[f]} (of {new[den]})")
        else:
            r_old = old[f] / old[den] if old[den] else 1.0
            r_new = new[f] / new[den] if new[den] else (1.0 if not old[f] else 0.0)
            if r_new < r_old - 1e-9:
                out.append(f"{f} {old[f]}/{old[den]} ({100 * r_old:.1f} %) → {new[f]}/{new[den]} ({100 * r_new:.1f} %)")
    if new["false_positives"] > old["false_positives"]:
        out.append(f"false_positives {old['false_positives']} → {new['false_positives']}")
    return out


def rises(old: dict, new: dict) -> list[str]:
    """What rose from `old` to `new` (a lower false-positive count too)."""
    out = []
    for f, den in GUARDED.items():
        r_old = old[f] / old[den] if old[den] else 1.0
        r_new = new[f] / new[den] if new[den] else 1.0
        if (new[den] == old[den] and new[f] > old[f]) or (new[den] != old[den] and r_new > r_old + 1e-9):
            out.append(f"{f} {old[f]}/{old[den]} → {new[f]}/{new[den]}")
    if new["false_positives"] < old["false_positives"]:
        out.append(f"false_positives {old['false_positives']} → {new['false_positives']}")
    return out


def pct(a: int, n: int) -> str:
    return f"{a}/{n} ({100 * a / n:.0f} %)" if n else f"{a}/{n}"


def table(measured: dict[str, dict], board: dict[str, dict]) -> str:
    rows = [
        "| dataset | failing | verdict | kind | kind+component | outcome | findings | false pos. | vs scoreboard |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name in sorted(set(measured) | set(board)):
        d = measured.get(name)
        old = board.get(name)
        if d is None:
            rows.append(f"| {name} | — | — | — | — | — | — | — | not measured |")
            continue
        if old is None:
            vs = "new"
        else:
            f, r = falls(old, d), rises(old, d)
            vs = ("FELL: " + "; ".join(f)) if f else ("rose: " + "; ".join(r)) if r else "same"
        n = d["failing"]
        rows.append(
            f"| {name} | {n} | {pct(d['with_verdict'], n)} | {pct(d['kind_right'], n)} | "
            f"{pct(d['kind_component_right'], n)} | {pct(d['outcome_right'], n)} | "
            f"{d['findings_found']}/{d['findings_expected']} | {d['false_positives']} | {vs} |"
        )
    return "\n".join(rows)


def check(board_path: str, files: list[str], complete: bool) -> int:
    measured = read_scores(files)
    board = read_board(board_path)
    print(table(measured, board))
    bad = []
    for name, d in sorted(measured.items()):
        if name in board:
            bad.extend(f"{name}: {f}" for f in falls(board[name], d))
    if complete:
        bad.extend(f"{name}: on the scoreboard but not measured by this run" for name in sorted(set(board) - set(measured)))
    new = sorted(set(measured) - set(board))
    risen = [n for n in measured if n in board and rises(board[n], measured[n])]
    if bad:
        print(f"\nscoreboard: {len(bad)} number(s) fell against {os.path.relpath(board_path)}:", file=sys.stderr)
        for b in bad:
            print(f"  {b}", file=sys.stderr)
        return 1
    if new or risen:
        print(
            f"\nscoreboard: nothing fell; {len(risen)} dataset(s) rose and {len(new)} are new — record them with "
            f"`python3 scripts/scoreboard.py update {' '.join(files)}` in the same commit"
        )
    else:
        print("\nscoreboard: every number as committed")
    return 0


def update(board_path: str, files: list[str], allow_drop: bool) -> int:
    measured = read_scores(files)
    board = read_board(board_path)
    bad = [f"{n}: {f}" for n, d in sorted(measured.items()) if n in board for f in falls(board[n], d)]
    if bad and not allow_drop:
        print("scoreboard: refusing to record a drop (give --allow-drop to record it anyway):", file=sys.stderr)
        for b in bad:
            print(f"  {b}", file=sys.stderr)
        return 1
    changed = [n for n in measured if board.get(n) != measured[n]]
    board.update(measured)
    write_board(board_path, board)
    print(f"scoreboard: {len(changed)} dataset(s) written to {os.path.relpath(board_path)}" + (f": {', '.join(sorted(changed))}" if changed else ""))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=["check", "update", "show"])
    ap.add_argument("files", nargs="*", help="score JSON files")
    ap.add_argument("--board", default=DEFAULT_BOARD, help="the scoreboard (default: tests/scoreboard.toml)")
    ap.add_argument("--complete", action="store_true", help="check: every dataset on the board must be measured")
    ap.add_argument("--allow-drop", action="store_true", help="update: record numbers that fell")
    a = ap.parse_intermixed_args(argv)
    try:
        if a.command == "show":
            print(table({}, {}) if not os.path.exists(a.board) else table(read_board(a.board), read_board(a.board)))
            return 0
        if not a.files:
            ap.error(f"{a.command} needs the score JSON files of a run")
        if a.command == "check":
            return check(a.board, a.files, a.complete)
        return update(a.board, a.files, a.allow_drop)
    except ScoreError as e:
        print(f"scoreboard: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
