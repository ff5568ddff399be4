"""An experiment's metric patterns (envkit.yaml's ``metrics``, issue 32 §5): how the run wrapper reads metrics from
what an unmodified script prints, as Guild does.

    metrics:
      key_value: true                                   # `loss: 0.25` lines (off by default)
      patterns:
        accuracy: 'Accuracy: \\d+/\\d+ \\((\\d+%)\\)'       # a regex with one group: the value

A value that ends in % is a fraction (57% -> 0.57); the last match in the run's output wins. Checked here, once,
as the config loads (one line for a pattern that is not a regex or has not exactly one group); the wrapper
(envkit/support/provenance_output.py reads them) is handed them as ENVKIT_METRIC_PATTERNS, through the
experiment's environment.
"""

from __future__ import annotations

import json
import re

from envkit.errors import EnvkitError


def metric_variables(at: str, metrics: dict | None) -> dict[str, str]:
    """ENVKIT_METRIC_PATTERNS for an experiment's ``metrics`` entry (none without one); ``at`` names it in errors."""
    if not metrics:
        return {}
    for name, pattern in metrics.get("patterns", {}).items():
        try:
            groups = re.compile(pattern).groups
        except re.error as exc:
            raise EnvkitError(
                f"{at}/metrics/patterns/{name}: {pattern!r} is not a regular expression ({exc}); give one with a "
                r"group around the value, e.g. 'Accuracy: ([0-9.]+%?)'"
            ) from None
        if groups != 1:
            raise EnvkitError(
                f"{at}/metrics/patterns/{name}: {pattern!r} has {groups} groups; give exactly one, around the value, "
                r"e.g. 'Accuracy: ([0-9.]+%?)' (make the others (?:...))"
            )
    from envkit.support.provenance_output import PATTERNS_VARIABLE  # here: the wrapper's imports only where they serve

    wanted = {"key_value": bool(metrics.get("key_value", False)), "patterns": dict(metrics.get("patterns", {}))}
    return {PATTERNS_VARIABLE: json.dumps(wanted, sort_keys=True)}
