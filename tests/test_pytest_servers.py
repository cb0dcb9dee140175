"""The storage-server plugin's summary line names every test skipped for want of a server, also
when pytest-xdist's workers ran them (`make test` runs most of the suite that way)."""

from __future__ import annotations

import pytest

from twofold.testing.pytest_servers import SERVER_NAMES

SKIPPING = f"""
import pytest

def test_needs_postgres():
    pytest.skip("{SERVER_NAMES[0]} unavailable: no binaries here")

def test_needs_both():
    pytest.skip("{SERVER_NAMES[0]} unavailable: no binaries here")

def test_needs_s3():
    pytest.skip("{SERVER_NAMES[1]} unavailable: rclone missing")

def test_skipped_for_another_reason():
    pytest.skip("PostgreSQL is not what this is about")

def test_runs():
    pass
"""

EXPECTED = [
    "*STORAGE SERVERS: 2 test(s) skipped because PostgreSQL is unavailable: no binaries here*",
    "*STORAGE SERVERS: 1 test(s) skipped because S3 (rclone serve s3) is unavailable: "
    "rclone missing*",
]


def test_summary_counts_skips_for_missing_servers(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_skipping=SKIPPING)
    result = pytester.runpytest("-p", "twofold.testing.pytest_servers")
    result.assert_outcomes(passed=1, skipped=4)
    result.stdout.fnmatch_lines(EXPECTED, consecutive=True)


def test_summary_counts_skips_in_xdist_workers(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_skipping=SKIPPING)
    result = pytester.runpytest_subprocess("-p", "twofold.testing.pytest_servers", "-n", "2")
    result.assert_outcomes(passed=1, skipped=4)
    result.stdout.fnmatch_lines(EXPECTED, consecutive=True)
