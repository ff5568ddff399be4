"""An experiment's metric patterns (envkit.yaml's metrics, issue 32 §5): checked as the config loads, handed to the
run wrapper as ENVKIT_METRIC_PATTERNS."""

from __future__ import annotations

import json

import pytest

from envkit.errors import EnvkitError
from envkit.project.metric_patterns import metric_variables

AT = "envkit.yaml: experiments/train"


def test_patterns_and_key_value_lines_reach_the_wrapper_as_one_variable():
    (value,) = metric_variables(AT, {"patterns": {"accuracy": r"Accuracy: \d+/\d+ \((\d+%)\)"}}).values()
    assert json.loads(value) == {"key_value": False, "patterns": {"accuracy": r"Accuracy: \d+/\d+ \((\d+%)\)"}}
    assert json.loads(metric_variables(AT, {"key_value": True})["ENVKIT_METRIC_PATTERNS"])["key_value"] is True
    assert metric_variables(AT, None) == {}


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        ("Accuracy: (", "envkit.yaml: experiments/train/metrics/patterns/accuracy: 'Accuracy: (' is not a regular "),
        ("Accuracy: [0-9]+", "'Accuracy: [0-9]+' has 0 groups; give exactly one, around the value"),
        ("(loss|acc): ([0-9.]+)", "has 2 groups; give exactly one, around the value"),
    ],
)
def test_a_pattern_that_is_no_regex_or_has_not_one_group_is_one_line(pattern, message):
    with pytest.raises(EnvkitError) as refused:
        metric_variables(AT, {"patterns": {"accuracy": pattern}})
    assert message in str(refused.value) and "\n" not in str(refused.value) and refused.value.exit_code == 2
