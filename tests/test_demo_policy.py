"""One default: ``trustmargin demo`` decides by the policy Python's
``TrustMargin.from_pretrained()`` applies (the shipped one for SmolLM2), names it in every
table header, shows what the paper's rule keeps, and ends with one plain sentence.

Real parts: the CLI on the embedded SmolLM2 model and the demo's own corpus.
"""

from __future__ import annotations

import pytest
from cli_support import run_main

from trustmargin_integrations.policy_file import AUTO, policy_file_for


def python_default_label() -> str:
    """The label of the policy ``TrustMargin.from_pretrained()`` applies to SmolLM2."""
    shipped = policy_file_for(AUTO, "smollm2-135m")
    assert shipped is not None
    return shipped.decision_policy.label


@pytest.mark.slow
def test_demo_applies_the_python_default_and_says_what_it_means() -> None:
    label = python_default_label()
    result = run_main("demo", "--limit", "2")
    assert result.exit_code == 0, result.output
    out = " ".join(result.output.split())
    assert f"policy: {label}" in out  # the decisions table's header
    assert f"trustmargin = policy {label}" in out  # the summary's header
    assert "TrustMargin (paper: " in out  # what the paper's rule would have kept
    assert f"What this means: TrustMargin decided by {label}" in out
    assert "trustmargin check" in out.split("What this means")[1]


@pytest.mark.slow
def test_demo_with_a_calibration_names_its_policy() -> None:
    result = run_main("demo", "--limit", "1", "--calibration", "shipped")
    assert result.exit_code == 0, result.output
    assert f"policy: {python_default_label()}" in " ".join(result.output.split())
