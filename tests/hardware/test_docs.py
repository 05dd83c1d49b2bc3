"""The examples in docs/topology.md are real: run them."""

from __future__ import annotations

import doctest
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "topology.md"


def test_topology_doc_examples_run() -> None:
    result = doctest.testfile(str(DOC), module_relative=False, verbose=False, report=True)
    assert result.attempted > 10
    assert result.failed == 0
