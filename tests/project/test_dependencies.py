"""A project's own requirements in every target's lock (issue 25 §4): envkit.yaml's ``requirements``."""

from __future__ import annotations

import re

import pytest

from envkit.cli import main
from envkit.errors import EnvkitError
from envkit.lock.inputs import lock_inputs
from envkit.project.load import load_config

TARGETS = (
    "targets:\n"
    '  cpu: {kind: cpu, torch: "2.9.0"}\n'
    '  cuda: {kind: cuda, torch: "2.9.0", cuda: "12.8", pip_packages: ["scipy>=1.13"]}\n'
    '  tpu-vm: {kind: tpu-vm, torch: "2.9.0", backend: torch_xla, torch_xla: "2.9.0"}\n'
)


def project(tmp_path, requirements: str, name: str = "requirements.txt"):
    (tmp_path / name).write_text(requirements)
    config = tmp_path / "envkit.yaml"
    config.write_text(f"requirements: {name}\n{TARGETS}")
    return config


def test_every_target_resolves_the_projects_requirements_with_its_own_torch(tmp_path):
    config = load_config(project(tmp_path, "torch>=2.8  # the targets pin it\nnumpy>=1.26\ntqdm==4.66.5\ntorch_xla\n"))
    for target in config.targets.values():
        requirements = lock_inputs(target).requirements
        assert "numpy>=1.26" in requirements and "tqdm==4.66.5" in requirements, target.name
        # torch and torch_xla come from the target's keys, and the project's tqdm replaces envkit's default
        assert [r for r in requirements if r.startswith(("torch==", "tqdm"))] == [
            r for r in requirements if r.startswith("torch==")
        ] + ["tqdm==4.66.5"]
        assert not any(r.startswith("torch_xla") and "==" not in r for r in requirements)
    assert "scipy>=1.13" in config.targets["cuda"].pip_packages
    assert any(r.startswith("torch_xla[tpu]==2.9.0") for r in lock_inputs(config.targets["tpu-vm"]).requirements)
    before = config.targets["cpu"].config_hash
    (tmp_path / "requirements.txt").write_text("numpy>=2\n")
    assert load_config(tmp_path / "envkit.yaml").targets["cpu"].config_hash != before  # a stale lock shows


def test_pyprojects_dependencies(tmp_path):
    text = '[project]\nname = "mine"\ndependencies = [\n  "numpy>=1.26",\n  "rich",\n]\n'
    config = load_config(project(tmp_path, text, "pyproject.toml"))
    assert {"numpy>=1.26", "rich"} <= set(config.targets["cpu"].pip_packages)


@pytest.mark.parametrize(
    ("requirements", "message"),
    [
        ("torch==2.8.0\n", "requirements.txt:1: 'torch==2.8.0' conflicts with target cpu's torch==2.9.0"),
        (
            "scipy==1.14.1\n",
            "requirements.txt:1: 'scipy==1.14.1' conflicts with target cuda's pip_packages 'scipy>=1.13'",
        ),
        (
            "numpy\ngit+https://example.com/lab/tool.git\n",
            "requirements.txt:2: 'git+https://example.com/lab/tool.git' is a VCS URL; a lock holds released packages",
        ),
        (
            "tool @ git+https://example.com/lab/tool.git\n",
            "requirements.txt:1: 'tool @ git+https://example.com/lab/tool.git' is a VCS URL",
        ),
        ("./vendor/tool\n", "requirements.txt:1: './vendor/tool' is a local path"),
        ("-e .\n", "requirements.txt:1: '-e .' is an editable install"),
        ("--index-url https://mirror.example.com/simple\n", "is a pip option"),
        ("tool @ https://example.com/tool-1.0.tar.gz\n", "is a URL"),
    ],
)
def test_a_requirement_no_lock_can_hold_is_one_line(tmp_path, capsys, requirements, message):
    config = project(tmp_path, requirements)
    with pytest.raises(EnvkitError, match=re.escape(message)):
        load_config(config)
    assert main(["lock", "--all", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and not (tmp_path / "docker").exists()


def test_a_requirements_file_outside_the_project_or_missing_is_one_line(tmp_path):
    config = tmp_path / "envkit.yaml"
    config.write_text(f"requirements: ../elsewhere.txt\n{TARGETS}")
    with pytest.raises(EnvkitError, match=r"requirements: '\.\./elsewhere\.txt' is outside the project"):
        load_config(config)
    config.write_text(f"requirements: missing.txt\n{TARGETS}")
    with pytest.raises(EnvkitError, match=r"^missing\.txt not found: name a requirements file"):
        load_config(config)
