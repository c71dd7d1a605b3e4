#!/usr/bin/env python3
"""Tests of scripts/scoreboard.py, through its command line as scripts/test
runs it: a fall fails `check`, a rise passes it, `update` refuses a fall
unless told, and a broken score file is an error, not a pass.

    python3 scripts/test_scoreboard.py
"""

import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCOREBOARD = os.path.join(HERE, "scoreboard.py")


def read(path):
    with open(path) as f:
        return f.read()


def dataset(**kw):
    d = {
        "failing": 100,
        "with_verdict": 100,
        "kind_right": 95,
        "kind_component_right": 90,
        "outcome_right": 100,
        "findings_expected": 10,
        "findings_found": 10,
        "false_positives": 0,
    }
    d.update(kw)
    return d


class Scoreboard(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.board = os.path.join(self.dir.name, "scoreboard.toml")

    def tearDown(self):
        self.dir.cleanup()

    def score(self, name="run.json", **datasets):
        p = os.path.join(self.dir.name, name)
        with open(p, "w") as f:
            json.dump({"datasets": datasets}, f)
        return p

    def cli(self, *args):
        p = subprocess.run(
            [sys.executable, SCOREBOARD, *args, "--board", self.board],
            capture_output=True,
            text=True,
            timeout=60,
        )
        return p.returncode, p.stdout + p.stderr

    def seed(self, **datasets):
        rc, out = self.cli("update", self.score("seed.json", **datasets))
        self.assertEqual(rc, 0, out)

    def test_a_fall_in_kind_and_component_fails_the_check_naming_dataset_and_field(self):
        self.seed(**{"e2e/A": dataset()})
        rc, out = self.cli("check", self.score(**{"e2e/A": dataset(kind_component_right=89)}))
        self.assertEqual(rc, 1, out)
        self.assertIn("e2e/A: kind_component_right 90 → 89", out)

    def test_a_new_false_positive_fails_the_check(self):
        self.seed(**{"e2e/A": dataset()})
        rc, out = self.cli("check", self.score(**{"e2e/A": dataset(false_positives=1)}))
        self.assertEqual(rc, 1, out)
        self.assertIn("false_positives 0 → 1", out)

    def test_a_rise_passes_the_check_and_says_to_record_it(self):
        self.seed(**{"e2e/A": dataset()})
        rc, out = self.cli("check", self.score(**{"e2e/A": dataset(kind_right=99, kind_component_right=99)}))
        self.assertEqual(rc, 0, out)
        self.assertIn("rose", out)
        self.assertIn("scoreboard.py update", out)

    def test_a_different_number_of_failing_requests_is_compared_as_a_ratio(self):
        self.seed(**{"e2e/A": dataset()})
        # 90 of 100 before; 50 of 60 is 83 %: a fall although no count fell below.
        fell = dataset(failing=60, with_verdict=60, kind_right=55, kind_component_right=50, outcome_right=60)
        rc, out = self.cli("check", self.score(**{"e2e/A": fell}))
        self.assertEqual(rc, 1, out)
        self.assertIn("kind_component_right 90/100 (90.0 %) → 50/60 (83.3 %)", out)
        # 190 of 200 is 95 %: more failing requests, a better ratio, fine.
        rose = dataset(failing=200, with_verdict=200, kind_right=195, kind_component_right=190, outcome_right=200)
        rc, out = self.cli("check", self.score(**{"e2e/A": rose}))
        self.assertEqual(rc, 0, out)

    def test_findings_are_compared_over_the_findings_expected(self):
        self.seed(**{"fixtures/a": dataset()})
        rc, out = self.cli("check", self.score(**{"fixtures/a": dataset(findings_found=9)}))
        self.assertEqual(rc, 1, out)
        self.assertIn("findings_found 10 → 9 (of 10)", out)

    def test_update_refuses_a_fall_and_leaves_the_board_as_it_was(self):
        self.seed(**{"e2e/A": dataset()})
        before = read(self.board)
        rc, out = self.cli("update", self.score(**{"e2e/A": dataset(outcome_right=99)}))
        self.assertEqual(rc, 1, out)
        self.assertIn("refusing", out)
        self.assertEqual(read(self.board), before)
        rc, out = self.cli("update", "--allow-drop", self.score(**{"e2e/A": dataset(outcome_right=99)}))
        self.assertEqual(rc, 0, out)
        self.assertIn("outcome_right = 99", read(self.board))

    def test_update_records_a_rise_and_keeps_datasets_it_did_not_measure(self):
        self.seed(**{"e2e/A": dataset(), "e2e/B": dataset()})
        rc, out = self.cli("update", self.score(**{"e2e/A": dataset(kind_right=100, kind_component_right=100)}))
        self.assertEqual(rc, 0, out)
        rc, out = self.cli("check", "--complete", self.score(**{"e2e/A": dataset(kind_right=100, kind_component_right=100), "e2e/B": dataset()}))
        self.assertEqual(rc, 0, out)
        self.assertIn("every number as committed", out)

    def test_a_dataset_on_the_board_that_the_run_did_not_measure_fails_a_complete_check(self):
        self.seed(**{"e2e/A": dataset(), "e2e/B": dataset()})
        rc, out = self.cli("check", "--complete", self.score(**{"e2e/A": dataset()}))
        self.assertEqual(rc, 1, out)
        self.assertIn("e2e/B: on the scoreboard but not measured", out)
        rc, out = self.cli("check", self.score(**{"e2e/A": dataset()}))
        self.assertEqual(rc, 0, out)

    def test_a_broken_score_file_is_an_error_not_a_pass(self):
        self.seed(**{"e2e/A": dataset()})
        bad = dict(dataset())
        del bad["kind_right"]
        rc, out = self.cli("check", self.score(**{"e2e/A": bad}))
        self.assertEqual(rc, 2, out)
        self.assertIn("lacks kind_right", out)
        rc, out = self.cli("check", self.score(**{"e2e/A": dataset(kind_right=101)}))
        self.assertEqual(rc, 2, out)
        p = os.path.join(self.dir.name, "garbage.json")
        with open(p, "w") as f:
            f.write("{not json")
        rc, out = self.cli("check", p)
        self.assertEqual(rc, 2, out)

    def test_a_dataset_written_by_two_files_is_an_error(self):
        a = self.score("a.json", **{"e2e/A": dataset()})
        b = self.score("b.json", **{"e2e/A": dataset()})
        rc, out = self.cli("check", a, b)
        self.assertEqual(rc, 2, out)
        self.assertIn("also in", out)


if __name__ == "__main__":
    unittest.main()
