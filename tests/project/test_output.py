"""envkit.yaml's `output` (issue 33 §4): the folders envkit writes, configurable, and every command takes them from
the config: render, render --check, the build context, run.sh's path, the locks and push records."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import paths
import pytest

from envkit.cli import main
from envkit.errors import EnvkitError
from envkit.image.build_context import stage_context
from envkit.project.load import load_config
from envkit.project.output import Output, refuse_outside

EXAMPLE = paths.TESTS / "example_project"
USERS_DOCKERFILE = "FROM python:3.11-slim\nCOPY . /app\n"
OUTPUT = "output:\n  images: build/envkit\n  notebooks: build/notebooks\n"


@pytest.fixture
def project(tmp_path, capsys, monkeypatch):
    """The example user repository with its own docker/cpu/Dockerfile, made a project by `envkit init`, its
    output moved to build/, and committed."""
    monkeypatch.setenv("ENVKIT_CACHE_DIR", str(tmp_path / "cache"))
    root = tmp_path / "repo"
    shutil.copytree(EXAMPLE, root)
    (root / "docker" / "cpu").mkdir(parents=True)
    (root / "docker" / "cpu" / "Dockerfile").write_text(USERS_DOCKERFILE)
    assert main(["init", "--dir", str(root)]) == 0
    with open(root / "envkit.yaml", "a") as stream:
        stream.write(OUTPUT)
    for argv in (["init", "-q"], ["add", "--all"]):
        subprocess.run(["git", "-C", str(root), *argv], check=True, capture_output=True)
    capsys.readouterr()
    return root


def test_a_config_without_output_writes_docker_and_notebooks(tmp_path):
    root = tmp_path / "repo"
    shutil.copytree(EXAMPLE, root)
    assert main(["init", "--dir", str(root)]) == 0
    assert load_config(root / "envkit.yaml").output == Output(Path("docker"), Path("notebooks"))


def test_render_check_and_the_build_context_use_the_configured_folders_and_leave_the_users_docker_alone(
    project, capsys, tmp_path
):
    config = project / "envkit.yaml"
    assert load_config(config).output == Output(Path("build/envkit"), Path("build/notebooks"))
    assert main(["render", "--all", "--config", str(config)]) == 0
    assert f"into {project / 'build' / 'envkit'} " in capsys.readouterr().out
    assert (project / "build" / "envkit" / "cpu" / "Dockerfile").read_text().startswith("# Rendered by envkit")
    assert (project / "docker" / "cpu" / "Dockerfile").read_text() == USERS_DOCKERFILE
    assert sorted(path.name for path in (project / "docker").rglob("*")) == ["Dockerfile", "cpu"]
    for _ in range(2):  # rendered, then remembered: the memo keeps the folders too
        assert main(["render", "--all", "--check", "--config", str(config)]) == 0
        assert "up to date" in capsys.readouterr().out
    (project / "build" / "envkit" / "cpu" / "run.sh").unlink()
    assert main(["render", "--all", "--check", "--config", str(config)]) == 1
    assert "build/envkit/cpu/run.sh: missing" in capsys.readouterr().out
    assert main(["render", "--all", "--config", str(config)]) == 0
    context = tmp_path / "context"
    options = _build_options(config)
    stage_context(project, load_config(config).target("cpu"), options, context)
    assert (context / "Dockerfile").read_text() == (project / "build" / "envkit" / "cpu" / "Dockerfile").read_text()
    # The user's docker/ is the project's like any other file: it reaches the image; envkit's own output does not.
    assert (context / "project" / "docker" / "cpu" / "Dockerfile").read_text() == USERS_DOCKERFILE
    assert not (context / "project" / "build").exists()


def test_run_sh_is_taken_from_the_configured_folder(project, capsys):
    subprocess.run(["git", "-C", str(project), "add", "--all"], check=True)
    code = main(["run", "cpu", "--dry-run", "--config", str(project / "envkit.yaml"), "train.py"])
    out, err = capsys.readouterr()
    assert (code, err) == (0, ""), err
    assert out.rstrip().endswith(f"{project}/build/envkit/cpu/run.sh python train.py")


@pytest.mark.parametrize(
    ("output", "says"),
    [
        ("{images: /tmp/out}", "output.images: '/tmp/out' is not valid"),
        ("{images: ../out}", "output.images: '../out' is not valid"),
        ("{notebooks: a/../../b}", "output.notebooks: 'a/../../b' is not valid"),
        ("{images: .}", "output.images: '.' is not valid"),
        ("{images: out, notebooks: out}", "output.images: 'out' and 'out' overlap"),
        ("{images: out, notebooks: out/nb}", "output.images: 'out' and 'out/nb' overlap"),
        ("{images: .git/out}", "output.images: '.git/out' is inside .git/"),
        ("{images: requirements.txt}", "holds the project's own requirements.txt"),
        ("{notebooks: train.py}", "is a file, not a folder"),
        ("{image: out}", "output.image: unknown key 'image'; did you mean 'images'?"),
    ],
)
def test_a_bad_output_is_one_line_and_exit_2(project, capsys, output, says):
    config = project / "envkit.yaml"
    text = config.read_text().replace(OUTPUT, "")
    if says.startswith("holds"):
        text += "requirements: requirements.txt\n" if "requirements:" not in text else ""
    config.write_text(text + f"output: {output}\n")
    with pytest.raises(EnvkitError) as raised:
        load_config(config)
    assert says in str(raised.value) and "\n" not in str(raised.value), raised.value
    assert raised.value.exit_code == 2


def _build_options(config: Path):
    from envkit.image.build_context import BuildOptions

    loaded = load_config(config)
    return BuildOptions(files_limit_mb=loaded.files_limit_mb, output=loaded.output)


def test_a_path_a_link_takes_out_of_the_project_is_refused(tmp_path):
    """Issue 39 §18: every writer asks one check; a link inside the project is fine, an explicit path elsewhere
    is the user's choice."""
    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    (project / "notebooks").mkdir(parents=True)
    elsewhere.mkdir()
    (project / "docker").symlink_to(elsewhere)
    (project / "inside").symlink_to("notebooks")
    refuse_outside(project, [project / "inside" / "x", tmp_path / "elsewhere" / "x", project / "new" / "x"])
    with pytest.raises(EnvkitError) as refused:
        refuse_outside(project, [project / "notebooks" / "a", project / "docker" / "cpu" / "Dockerfile"])
    assert str(refused.value) == (
        f"{project}/docker/cpu/Dockerfile is in {project} but a symbolic link takes it to {elsewhere}/cpu/Dockerfile, "
        "outside it: envkit writes only inside the project; replace the link with a folder, or write elsewhere "
        "with --output DIR"
    )
