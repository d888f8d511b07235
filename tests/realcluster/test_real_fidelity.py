#!/usr/bin/env python3
"""The stand-in (tests/integration/apiserver.py) against the real kube-apiserver: the request
script of compare_standin.py (the provisioner's requests and their error paths) gets the same
answers from both - status, Status reason and message, the fields the provisioner reads,
warnings - except for the differences listed in tests/integration/README.md (KNOWN)."""

import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from realharness import require_cluster  # noqa: E402
import compare_standin  # noqa: E402


def setUpModule():
    require_cluster()


class FidelityTest(unittest.TestCase):
    def test_standin_answers_like_the_real_server(self):
        cluster = require_cluster()
        with tempfile.TemporaryDirectory(prefix="hp-fidelity-") as tmp:
            diffs = compare_standin.compare(cluster.client, tmp)
        bad = compare_standin.unexpected(diffs)
        self.assertEqual(bad, [], "the stand-in answers differently from kube-apiserver %s:\n%s"
                         % (cluster.version, "\n".join(bad)))


if __name__ == "__main__":
    unittest.main(verbosity=2)
