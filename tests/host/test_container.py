"""`envkit run TARGET SCRIPT`: which of the project's files run.sh runs, and the one line for one it cannot."""

from __future__ import annotations

import shutil
import subprocess

import paths
import pytest

from envkit.cli import main

EXAMPLE = paths.TESTS / "example_project"


@pytest.fixture
def project(tmp_path, capsys):
    """The example user repository, made a project by `envkit init` and committed: train.py is tracked."""
    root = tmp_path / "repo"
    shutil.copytree(EXAMPLE, root)
    assert main(["init", "--dir", str(root)]) == 0
    (root / "scratch.py").write_text("print('untracked')\n")
    (root / "data").mkdir()
    (root / "data" / "prepare.py").write_text("print('left out')\n")
    (root / ".dockerignore").write_text("data/\n")
    for argv in (["init", "-q"], ["add", "--all"]):
        subprocess.run(["git", "-C", str(root), *argv], check=True, capture_output=True)
    subprocess.run(["git", "-C", str(root), "rm", "-q", "--cached", "scratch.py"], check=True)
    capsys.readouterr()
    return root


def run(capsys, root, *argv: str) -> tuple[int, str, str]:
    code = main(["run", "cpu", "--dry-run", "--config", str(root / "envkit.yaml"), *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_a_script_of_the_project_runs_by_its_path_with_its_arguments(project, capsys):
    code, out, err = run(capsys, project, "train.py", "--", "--epochs", "1")
    assert (code, err) == (0, ""), err
    assert out.rstrip().endswith(f"{project}/docker/cpu/run.sh python train.py --epochs 1")


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("missing.py", "no missing.py in the project {root}: give a recipe's name (recipes/NAME.py) or the path"),
        ("mnist", "no recipes/mnist.py in the project {root}: give"),
        ("../train.py", "no ../train.py in the project {root}: give"),
        ("/etc/hostname.py", "no /etc/hostname.py in the project {root}: give"),
        ("scratch.py", "scratch.py is not among the files git tracks in {root} less .dockerignore's, so no image"),
        ("data/prepare.py", "data/prepare.py is not among the files git tracks in {root} less .dockerignore's"),
    ],
)
def test_a_script_the_image_cannot_hold_is_one_line(project, capsys, name, says):
    code, out, err = run(capsys, project, name)
    assert (code, out) == (2, "")
    assert err.startswith("envkit: error: " + says.format(root=project)) and err.count("\n") == 1, err


@pytest.mark.parametrize("rendered", [False, True], ids=["not-rendered", "not-executable"])
def test_a_run_sh_that_is_missing_or_cannot_start_is_one_line(project, capsys, monkeypatch, rendered):
    """Before: `envkit run cpu train.py` in a project whose docker/cpu/run.sh was never rendered ended in a
    FileNotFoundError traceback (a PermissionError one after `chmod -x run.sh`), once the host check passed."""
    from envkit.host import doctor
    from envkit.image import build
    from envkit.support import docker_client

    monkeypatch.setattr(doctor, "require", lambda *args, **kwargs: None)
    monkeypatch.setattr(doctor, "inspect_host", lambda: None)
    monkeypatch.setattr(build, "resolve_image", lambda *args, **kwargs: None)
    monkeypatch.setattr(docker_client, "connect_docker", lambda: None)
    run_sh = project / "docker" / "cpu" / "run.sh"
    if rendered:
        assert main(["render", "--all", "--config", str(project / "envkit.yaml")]) == 0
        run_sh.chmod(0o644)
    capsys.readouterr()
    code = main(["run", "cpu", "--config", str(project / "envkit.yaml"), "train.py"])
    out, err = capsys.readouterr()
    assert (code, out) == (2, "")
    says = "cannot be started (Permission denied)" if rendered else "is missing: cpu's files are not rendered"
    assert err.startswith(f"envkit: error: {run_sh} {says}") and err.count("\n") == 1, err
