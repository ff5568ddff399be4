"""envkit.project.files: what an image holds and a notebook carries of the project."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from envkit.errors import EnvkitError
from envkit.project.files import project_files


def _git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True)


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    root = tmp_path / "mine"
    (root / "src").mkdir(parents=True)
    (root / "train.py").write_text("print('train')\n")
    (root / "src" / "model.py").write_text("LAYERS = 2\n")
    (root / "notes.md").write_text("tracked, then ignored\n")
    _git(root, "init", "-q")
    _git(root, "add", "train.py", "src/model.py", "notes.md")
    (root / "data").mkdir()
    (root / "data" / "big.bin").write_bytes(b"\0" * 4096)  # untracked: never the image's
    return root


def test_the_tracked_files_less_dockerignore(repository):
    (repository / ".dockerignore").write_text("# docs stay out\n*.md\n")
    files = project_files(repository)
    assert files.paths == ("src/model.py", "train.py") and files.tracked
    assert files.sizes == (len("LAYERS = 2\n"), len("print('train')\n"))


def test_a_deleted_tracked_file_and_a_symlink_are_left_out(repository):
    (repository / "notes.md").unlink()
    (repository / "link.py").symlink_to(repository / "train.py")
    _git(repository, "add", "link.py")
    assert project_files(repository).paths == ("src/model.py", "train.py")


def test_a_project_in_a_subfolder_of_the_repository_lists_its_own_files(repository):
    (repository / "src" / "envkit.yaml").write_text("targets: {}\n")
    _git(repository, "add", "src/envkit.yaml")
    assert project_files(repository / "src").paths == ("envkit.yaml", "model.py")


def test_a_folder_without_git_is_listed_whole_less_dockerignore(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "big.bin").write_bytes(b"\0")
    (tmp_path / "train.py").write_text("print('train')\n")
    (tmp_path / ".dockerignore").write_text("data\n")
    files = project_files(tmp_path)
    assert files.paths == (".dockerignore", "train.py") and not files.tracked
    assert "is not a git work tree" in files.source()


def test_files_over_the_limit_are_one_line_naming_the_largest(repository):
    (repository / "weights.pt").write_bytes(b"\0" * 1_500_000)
    _git(repository, "add", "weights.pt")
    with pytest.raises(EnvkitError) as refused:
        project_files(repository, limit_mb=1)
    message = str(refused.value)
    assert "\n" not in message and "over the 1 MB limit" in message
    assert message.index("weights.pt (1.5 MB)") < message.index("train.py") and ".dockerignore" in message


def test_what_envkit_writes_is_never_the_projects(repository, tmp_path):
    # Tracked or not, render's output: an image target's rendered files change with every other target's render.
    for rendered in ("docker/cpu/Dockerfile", "notebooks/colab-t4/requirements.lock"):
        (repository / rendered).parent.mkdir(parents=True)
        (repository / rendered).write_text("rendered\n")
    _git(repository, "add", "docker", "notebooks")
    assert project_files(repository).paths == ("notes.md", "src/model.py", "train.py")
    # Outside git, the runs' results and data and the venvs too: every run would change the next image.
    folder = tmp_path / "plain"
    made = (
        "results/run.json",
        "data/x.bin",
        ".venv/bin/python",
        "docker/cpu/run.sh",
        ".cache/rendered",
        "src/.ruff_cache/x",
    )
    for name in ("train.py", *made):
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text("x\n")
    assert project_files(folder).paths == ("train.py",)
