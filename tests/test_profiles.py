"""The hypothesis profiles govern every property test (`twofold.testing.profiles`)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from twofold.testing.profiles import (
    BASE_EXAMPLES,
    FACTORS,
    UnknownProfile,
    examples,
    factor,
    profile_name,
)

TESTS = Path(__file__).parent


def test_the_environment_selects_the_profile() -> None:
    assert profile_name({}) == "dev"
    assert profile_name({"CI": "true"}) == "ci"
    assert profile_name({"CI": "1"}) == "ci"
    assert profile_name({"CI": "false"}) == "dev"
    assert profile_name({"CI": "true", "TWOFOLD_HYPOTHESIS": "deep"}) == "deep"
    assert profile_name({"TWOFOLD_HYPOTHESIS": "dev", "CI": "true"}) == "dev"


def test_an_unknown_profile_is_a_typed_error_naming_the_known_ones() -> None:
    with pytest.raises(UnknownProfile, match=r"'deeper'.*\['ci', 'deep', 'dev'\]"):
        profile_name({"TWOFOLD_HYPOTHESIS": "deeper"})


def test_deeper_profiles_search_more() -> None:
    # ci searches as dev does (the whole suite must fit ~10 minutes on 2 cores) and prints the
    # reproducing blob; deep is where the depth goes.
    assert FACTORS["dev"] <= FACTORS["ci"] < FACTORS["deep"]


def test_a_stated_budget_scales_with_the_loaded_profile() -> None:
    assert examples(7) == 7 * factor()
    assert settings().max_examples == BASE_EXAMPLES * factor()
    with pytest.raises(ValueError, match="n >= 1"):
        examples(0)
    runs = []

    @settings(max_examples=examples(3), database=None)
    @given(st.integers())
    def probe(n: int) -> None:
        runs.append(n)

    probe()
    assert len(runs) == 3 * factor()


def test_no_test_pins_its_example_count() -> None:
    """A literal `max_examples=<int>` overrides the profile, so CI's deeper search would silently
    not happen for that test (the defect this module exists for)."""
    pinned = []
    for path in sorted(TESTS.rglob("*.py")):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"max_examples\s*=\s*\d", line):
                pinned.append(f"{path.relative_to(TESTS)}:{n}: {line.strip()}")
    # The protocol strategies' coverage sample is a fixed-size sample, not a search.
    pinned = [p for p in pinned if not p.startswith("protocol/test_strategies.py")]
    assert not pinned, "\n".join(pinned)


def test_ci_selects_the_ci_profile() -> None:
    run = (TESTS.parent / ".ci" / "run").read_text()
    assert re.search(r"^export CI=true\b", run, re.M), ".ci/run must select the ci profile"


@pytest.mark.timeout(7)
def test_per_test_timeouts_scale_with_the_profile(request: pytest.FixtureRequest) -> None:
    marker = request.node.get_closest_marker("timeout")
    assert marker is not None and marker.args[0] == 7 * factor()
