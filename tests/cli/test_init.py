"""`envkit init` in an existing repository (issue 25 §2): tests/example_project is a user's repository."""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import sys
from pathlib import Path

import paths
import pytest

from envkit.cli import main
from envkit.project.config import load_config
from envkit.project.experiments import MAKE_TARGETS, load_experiments

EXAMPLE = paths.TESTS / "example_project"
ENVKIT = str(Path(sys.executable).with_name("envkit"))


@pytest.fixture
def repo(tmp_path):
    shutil.copytree(EXAMPLE, tmp_path / "repo")
    return tmp_path / "repo"


def tree(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in root.rglob("*")
        if p.is_file()
    }


def init(capsys, root: Path) -> tuple[int, str]:
    code = main(["init", "--dir", str(root)])
    return code, capsys.readouterr().err


def test_init_makes_a_project_of_a_users_repository(repo, capsys):
    code, err = init(capsys, repo)
    assert code == 0 and "envkit: wrote envkit.yaml, envkit.mk, Makefile (torch 2.9.0)" in err
    assert "not a git repository" in err  # handled: init needs no git, and says what the images will need
    config = load_config(repo / "envkit.yaml")
    assert list(config.targets) == ["cpu", "cuda", "tpu-vm", "colab-t4", "colab-tpu", "kaggle-tpu"]
    assert {target.torch for target in config.targets.values()} == {"2.9.0"}  # the version requirements.txt pins
    assert all("tabulate==0.9.0" in target.pip_packages for target in config.targets.values())
    table = load_experiments(repo / "envkit.yaml")
    # One experiment per script, on every default target (issue 32 §1), not one per kind.
    assert {name: (e.kind, e.command, e.targets) for name, e in table.items()} == {
        "train": ("cpu", ("python", "train.py"), tuple(config.targets)),
    }
    assert [table["train"].on(target).gpus for target in config.targets.values()] == [
        "none",
        "first",
        "none",
        "first",
        "none",
        "none",
    ]
    assert (repo / "Makefile").read_text() == "# envkit's targets: make help lists them.\ninclude envkit.mk\n"
    # make train works in the user's repository as make tpu-mnist does here, and TARGET= picks another target
    for target in ("", "cuda", "tpu-vm"):
        done = subprocess.run(
            ["make", "-s", "train", f"ENVKIT={ENVKIT}", "DRY_RUN=1", *([f"TARGET={target}"] if target else [])],
            cwd=repo,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        assert "# 3. experiment train" in done.stdout
        assert f"# 2. build the {target or 'cpu'} image (cached)" in done.stdout


def test_init_twice_changes_nothing_and_never_overwrites(repo, capsys):
    assert init(capsys, repo)[0] == 0
    before = tree(repo)
    code, err = init(capsys, repo)
    assert code == 2 and err == (
        f"envkit: error: {repo / 'envkit.yaml'} exists: envkit init never overwrites a file; "
        "edit it, or move it away and run init again\n"
    )
    assert tree(repo) == before
    (repo / "envkit.yaml").unlink()
    code, err = init(capsys, repo)
    assert (
        code == 2
        and f"{repo / 'envkit.mk'} exists" in err
        and tree(repo) == {k: v for k, v in before.items() if k != "envkit.yaml"}
    )


def test_an_existing_makefile_is_left_alone(repo, capsys):
    (repo / "Makefile").write_text("all:\n\ttrue\n")
    code, err = init(capsys, repo)
    assert code == 0 and "add `include envkit.mk` to your Makefile" in err
    assert (repo / "Makefile").read_text() == "all:\n\ttrue\n"


def test_pyproject_dependencies_and_a_torch_pin_set_the_targets(repo, capsys):
    (repo / "requirements.txt").unlink()
    (repo / "pyproject.toml").write_text('[project]\nname = "mine"\ndependencies = ["torch==2.8.0", "tabulate"]\n')
    (repo / "eval_model.py").write_text('print("no entry point")\n')
    (repo / "sweep.py").write_text('if __name__ == "__main__":\n    pass\n')
    assert init(capsys, repo)[0] == 0
    config = load_config(repo / "envkit.yaml")
    assert re.search(r"^requirements: pyproject.toml$", (repo / "envkit.yaml").read_text(), re.MULTILINE)
    assert {target.torch for target in config.targets.values()} == {"2.8.0"}
    assert list(load_experiments(repo / "envkit.yaml")) == ["sweep", "train"]


def test_a_requirements_line_no_lock_can_hold_stops_init_before_it_writes(repo, capsys):
    (repo / "requirements.txt").write_text("torch==2.9.0\ngit+https://example.com/lab/tool.git\n")
    before = tree(repo)
    code, err = init(capsys, repo)
    assert code == 2 and err == (
        "envkit: error: requirements.txt:2: 'git+https://example.com/lab/tool.git' is a VCS URL; "
        "a lock holds released packages of an index only: name the package and a version\n"
    )
    assert tree(repo) == before


def test_the_make_include_names_only_targets_no_experiment_may_take():
    include = (paths.REPO_ROOT / "templates" / "init" / "envkit.mk").read_text()
    phony = re.search(r"^\.PHONY: (.*)$", include, re.MULTILINE).group(1).split()
    assert set(phony) - {"$(ENVKIT_EXPERIMENTS)"} <= set(MAKE_TARGETS)


def test_the_example_project_holds_nothing_of_this_repository():
    ours = {hashlib.sha256(p.read_bytes()).hexdigest() for p in (paths.REPO_ROOT / "recipes").rglob("*.py")}
    assert sorted(p.name for p in EXAMPLE.iterdir()) == ["README.md", "requirements.txt", "train.py"]
    assert not {hashlib.sha256(p.read_bytes()).hexdigest() for p in EXAMPLE.iterdir()} & ours


def test_a_script_named_like_a_make_target_gets_a_name_of_its_own(repo, capsys):
    (repo / "test.py").write_text('if __name__ == "__main__":\n    pass\n')
    assert init(capsys, repo)[0] == 0
    assert list(load_experiments(repo / "envkit.yaml")) == ["run-test", "train"]
