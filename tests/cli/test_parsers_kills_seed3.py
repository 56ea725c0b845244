"""The NCCL version smoke reports, read from nccl-tests' own header line (issue 27, cli seed 3).

nccl.h: ``NCCL_VERSION(X,Y,Z)`` is ``X*1000 + Y*100 + Z`` while ``X <= 2 && Y <= 8``, else
``X*10000 + Y*100 + Z``. The version smoke prints (its JSON ``nccl_version``, the table's NCCL row) is
what an operator compares with the release notes of the image, so each release reads as itself, at
both ends of each scheme.
"""

from __future__ import annotations

import pytest

from mlcluster.cli.parsers import parse_all_reduce
from tests.cli.conftest import transcript


@pytest.mark.parametrize(
    ("code", "version"),
    [
        (2708, "2.7.8"),  # the old scheme, its last minor release
        (20900, "2.9.0"),  # the first release of the new scheme
        (22703, "2.27.3"),  # the p5 transcript's own
        (30000, "3.0.0"),  # a major release's first codes: X*10000 exactly, and just above it
        (30002, "3.0.2"),
        (40003, "4.0.3"),
        (39999, "3.99.99"),  # the last code of major 3
    ],
)
def test_the_nccl_library_code_reads_as_its_release(code: int, version: str) -> None:
    text = transcript("all_reduce_p5.txt").replace("nccl-library=22703", f"nccl-library={code}")
    assert f"nccl-library={code}" in text
    result = parse_all_reduce(text)
    assert (result.nccl_version, result.nccl_tests_version) == (version, "2.17.10")
