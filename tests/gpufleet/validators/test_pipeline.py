"""The rules of the AMI pipeline's file beyond one field (gpufleet/validators/pipeline.py): the profiles to build and
the Packer checksum, each with its exact one-line message."""

from __future__ import annotations

import pytest

from tests.gpufleet.ami.pipeline_files import problems, write

PROFILES = "al2023-cuda13, p4d-al2-cuda11, p4d-ubuntu1804-cuda11, ubuntu2204-cuda12, ubuntu2404-cuda13"


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"profiles": []}, f"profiles: no profile to build (list at least one of: {PROFILES})"),
        (
            {"profiles": ["p4d-al2-cuda11", "p5-cuda13"]},
            f"profiles.1: 'p5-cuda13' is not an AMI profile (allowed: {PROFILES}; see ami/profiles)",
        ),
        (
            {"profiles": ["p4d-al2-cuda11", "p4d-al2-cuda11"]},
            "profiles.1: 'p4d-al2-cuda11' is listed twice (list each profile once)",
        ),
        (
            {"packer__sha256": "ABC"},
            "packer.sha256: 'ABC' is not a SHA-256 digest (64 lower-case hex digits, from packer_1.11.2_SHA256SUMS; "
            "or null)",
        ),
    ],
)
def test_each_rule_reports_its_exact_message(tmp_path, changes, expected):
    assert problems(write(tmp_path, **changes)) == [expected]
