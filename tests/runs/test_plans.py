"""Run plans on this host (compare's fallback without Docker): issue 32 §9."""

from __future__ import annotations

import sys
from types import SimpleNamespace

from envkit.project.experiments import load_experiments
from envkit.project.load import load_config
from envkit.project.placement import place
from envkit.runs import plans
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


def test_a_command_on_a_cpu_shares_one_thread_budget_over_its_processes(tmp_path, monkeypatch):
    """Issue 32, make demo on 2 CPUs: torchrun gives each process one thread, one process takes every core; here
    one process gets the budget and each of torchrun's CPU_DDP_PROCESSES its share, unless env: says otherwise."""
    monkeypatch.setattr(plans.os, "sched_getaffinity", lambda pid: set(range(4)), raising=False)
    config = tmp_path / "envkit.yaml"
    config.write_text(
        'targets:\n  cpu: {kind: cpu, torch: "2.9.0"}\nexperiments:\n'
        "  one: {summary: s, command: [python, train.py], targets: [cpu]}\n"
        "  ddp: {summary: s, command: [python, ddp.py], targets: [cpu], scale: torchrun}\n"
        "  own: {summary: s, command: [python, train.py], targets: [cpu], env: {OMP_NUM_THREADS: '3'}}\n"
    )
    table = load_experiments(config)

    def threads(name: str) -> str:
        (step,) = plans.local_experiment_plan(table[name], sys.executable, root=tmp_path).steps
        return step.env["OMP_NUM_THREADS"]

    assert (threads("one"), threads("ddp"), threads("own")) == ("4", str(4 // plans.CPU_DDP_PROCESSES), "3")


def test_a_targets_env_reaches_the_program_over_the_thread_budget_on_a_host_and_in_its_image(tmp_path, monkeypatch):
    """Issue 40 §7: cpu-1t's OMP_NUM_THREADS=1 was 2 on the host (the budget) and in the image (-e over its ENV)."""
    monkeypatch.setattr(plans.os, "sched_getaffinity", lambda pid: set(range(2)), raising=False)
    config = tmp_path / "envkit.yaml"
    config.write_text(
        'targets:\n  cpu: {kind: cpu, torch: "2.9.0"}\n'
        '  cpu-1t: {kind: cpu, torch: "2.9.0", env: {OMP_NUM_THREADS: "1", GREETING: target}}\n'
        "experiments:\n  train: {summary: s, command: [python, train.py], targets: [cpu, cpu-1t],"
        " env: {GREETING: experiment}}\n"
    )
    project = load_config(config)
    for target, threads in (("cpu", "2"), ("cpu-1t", "1")):
        entry, placed = place(project, project.experiments["train"], target)
        (host,) = plans.local_experiment_plan(entry, sys.executable, root=tmp_path).steps
        image = plans.experiment_plan(entry, placed, config=config, output=project.output, gpus=None).steps[-1]
        for env in (host.env, image.env):  # the experiment's own env over the target's
            assert (env["OMP_NUM_THREADS"], env["GREETING"]) == (threads, "experiment")
        assert image.env["ENVKIT_ENV"].split() == ["OMP_NUM_THREADS", "GREETING"]  # run.sh passes each
