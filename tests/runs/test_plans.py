"""Run plans on this host (compare's fallback without Docker): issue 32 §9."""

from __future__ import annotations

import sys
from types import SimpleNamespace

from envkit.runs.plans import compare_plan

FACTS = SimpleNamespace(gpus=[], devices={}, docker_version=None, docker_error="no engine answers")


def test_compare_never_runs_a_command_on_a_python_that_lacks_its_packages(tmp_path):
    """Before: without Docker, compare ran the project's scripts with envkit's own interpreter, which lacks them."""
    (tmp_path / "requirements.txt").write_text("envkit-surely-absent-dist==1.0\n")
    config = tmp_path / "envkit.yaml"
    config.write_text(
        'requirements: requirements.txt\ntargets:\n  cpu: {kind: cpu, torch: "2.9.0"}\nexperiments:\n'
        "  train: {summary: s, command: [python, train.py], targets: [cpu]}\n"
    )
    plan = compare_plan(
        tmp_path / "results", epochs=None, dataset="fake", max_steps=None, config=config, facts=FACTS, runnable=[]
    )
    assert [step.title for step in plan.steps] == ["report"]
    assert (
        f"not run here: train needs envkit-surely-absent-dist, which {sys.executable} lacks; run it with its target's "
        "venv: envkit venv cpu, then envkit experiment train --python .venv-cpu/bin/python"
    ) in plan.notes
