"""`envkit targets | matrix | render` as a user runs them."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from envkit.cli import main
from envkit.support import provenance

WRAPPER = ", ".join(provenance.shipped())  # the run wrapper's files render writes beside the Dockerfile


@pytest.fixture()
def project(tmp_path, repo_root):
    """A copy of the repo's config and templates (and what its notebook targets render from: their
    locks and the recipes), so tests may render and break it freely."""
    shutil.copy(repo_root / "envkit.yaml", tmp_path / "envkit.yaml")
    shutil.copytree(repo_root / "templates", tmp_path / "templates")
    shutil.copytree(repo_root / "notebooks", tmp_path / "notebooks")
    shutil.copytree(repo_root / "recipes", tmp_path / "recipes", ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def files_under(directory: Path) -> dict[str, bytes]:
    return {p.relative_to(directory).as_posix(): p.read_bytes() for p in directory.rglob("*") if p.is_file()}


def test_render_all_check_passes_on_the_repo(capsys, repo_root):
    code, out, err = run(capsys, "render", "--all", "--check", "--config", str(repo_root / "envkit.yaml"))
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        f"{name}: up to date ({repo_root / 'docker' / name})" for name in ("cpu", "cuda", "tpu-vm")
    ] + [f"{name}: up to date ({repo_root / 'notebooks' / name})" for name in ("colab-tpu", "colab-t4", "kaggle-tpu")]


def test_render_writes_the_committed_files(capsys, project, repo_root):
    # Locks are render inputs: a locked Dockerfile installs its lock and records its sha256.
    for lock in (repo_root / "docker").glob("*/requirements.lock"):
        (project / "docker" / lock.parent.name).mkdir(parents=True)
        shutil.copy(lock, project / "docker" / lock.parent.name / lock.name)
    code, out, _ = run(capsys, "render", "--all", "--config", str(project / "envkit.yaml"))
    each = 3 + len(provenance.shipped())  # 3 templates and the wrapper's files
    assert code == 0 and f"rendered {3 * each} files for cpu, cuda, tpu-vm" in out
    # docker/<target>/requirements.lock comes from `envkit lock`, not from render.
    committed = {path: data for path, data in files_under(repo_root / "docker").items() if not path.endswith(".lock")}
    assert {
        path: data for path, data in files_under(project / "docker").items() if not path.endswith(".lock")
    } == committed


def test_render_one_target_into_output(capsys, project):
    code, _, _ = run(
        capsys, "render", "--target", "cuda", "--config", str(project / "envkit.yaml"), "--output", str(project / "out")
    )
    wrapper = [f"cuda/{name}" for name in provenance.shipped()]
    assert code == 0 and sorted(files_under(project / "out")) == sorted(
        ["cuda/.dockerignore", "cuda/Dockerfile", "cuda/run.sh", *wrapper]
    )


def test_stdout_shows_tpu_pins_and_writes_nothing(capsys, project):
    code, out, _ = run(capsys, "render", "--target", "tpu-vm", "--stdout", "--config", str(project / "envkit.yaml"))
    assert code == 0 and not (project / "docker").exists()
    assert out.startswith("==> tpu-vm/Dockerfile <==\n")
    assert "torch==2.9.0 \\" in out and "'torch_xla[tpu]==2.9.0'" in out  # no lock in this copy: unlocked
    assert "==> tpu-vm/run.sh <==" in out and "==> tpu-vm/.dockerignore <==" in out


def test_check_reports_stale_files_with_exit_1(capsys, project):
    config = str(project / "envkit.yaml")
    assert run(capsys, "render", "--all", "--config", config)[0] == 0
    text = (project / "envkit.yaml").read_text().replace('cuda: "12.8"', 'cuda: "13.0"')
    (project / "envkit.yaml").write_text(text)
    code, out, err = run(capsys, "render", "--all", "--check", "--config", config)
    assert code == 1
    lines = out.splitlines()
    assert lines[0] == f"cpu: up to date ({project / 'docker' / 'cpu'})" and lines[2].startswith("tpu-vm: up to date")
    assert lines[1].startswith(f"cuda: {project / 'docker' / 'cuda' / 'Dockerfile'}: stale (")
    assert err == "envkit: error: rendered files are stale (cuda): run `envkit render --all` and commit\n"
    code, _, err = run(capsys, "render", "--target", "cuda", "--check", "--config", config)
    assert (
        code == 1
        and err == "envkit: error: rendered files are stale (cuda): run `envkit render --target cuda` and commit\n"
    )


def test_a_killed_renders_staged_files_are_reported_then_removed(capsys, project):
    """Issue 28 §16: SIGKILL during render --all left .<file>.<random>.partial files (422 KB notebooks)
    that git status showed, that the next render kept and that --check did not report."""
    config = str(project / "envkit.yaml")
    assert run(capsys, "render", "--all", "--config", config)[0] == 0
    gone = 4194305  # above Linux's largest process ID: no process has it
    killed = project / "notebooks" / "kaggle-tpu" / f".tpu-mnist.ipynb.{gone}-64f9ehqp.partial"
    killed.write_text("half a notebook")
    writing = project / "docker" / "cpu" / f".Dockerfile.{os.getpid()}-k2x.partial"  # a render at work: its own
    writing.write_text("being written")
    mine = project / "docker" / "cpu" / f".notes.txt.{gone}-k2x.partial"  # not a file render writes
    mine.write_text("someone else's")
    code, out, err = run(capsys, "render", "--all", "--check", "--config", config)
    assert code == 1 and err.startswith("envkit: error: rendered files are stale (kaggle-tpu)"), err
    assert f"{killed}: left by a render that was killed; `envkit render` removes it" in out
    assert run(capsys, "render", "--all", "--config", config)[0] == 0
    assert not killed.exists() and writing.exists() and mine.exists()
    assert run(capsys, "render", "--all", "--check", "--config", config)[0] == 0


def removed_target(project: Path, name: str = "old-gpu") -> Path:
    """docker/<name> as render left it for a target since removed from the config: cpu's files, its marks naming it."""
    folder = project / "docker" / name
    shutil.copytree(project / "docker" / "cpu", folder)
    for file in ("Dockerfile", "run.sh"):
        (folder / file).write_text((folder / file).read_text().replace('target "cpu"', f'target "{name}"', 1))
    return folder


def test_a_targets_folder_the_user_copied_is_theirs_and_never_removed(capsys, project):
    """Before: the user copied the cpu target's folder to one named mine and edited its Dockerfile to build a
    variant of their own; render --all removed the folder ("not a target in the config"), because the copied files
    carried envkit's mark. The mark names the target render wrote it for: one naming cpu in mine is a copy."""
    config = str(project / "envkit.yaml")
    assert run(capsys, "render", "--all", "--config", config)[0] == 0
    mine = project / "docker" / "mine"
    shutil.copytree(project / "docker" / "cpu", mine)
    (mine / "Dockerfile").write_text((mine / "Dockerfile").read_text() + "RUN echo my own variant\n")
    before = files_under(mine)
    assert run(capsys, "render", "--all", "--check", "--config", config)[0] == 0
    code, out, _ = run(capsys, "render", "--all", "--config", config)
    assert code == 0 and "removed" not in out and files_under(mine) == before


def test_the_advice_for_a_removed_target_converges(capsys, project):
    """Before: check said "remove it; run `envkit render --all`", and render --all left the directory, so check kept failing."""
    config = str(project / "envkit.yaml")
    assert run(capsys, "render", "--all", "--config", config)[0] == 0
    removed_target(project)
    (project / "docker" / "notes").mkdir()  # a directory of someone else's files is left alone
    (project / "docker" / "notes" / "Dockerfile").write_text("FROM scratch\n")
    code, out, err = run(capsys, "render", "--all", "--check", "--config", config)
    assert (
        code == 1
        and err
        == "envkit: error: rendered files are stale (1 removed target(s)): run `envkit render --all` and commit\n"
    )
    assert out.splitlines()[-1] == (
        f"{project / 'docker' / 'old-gpu'}: not a target in the config: `envkit render --all` "
        f"removes Dockerfile, run.sh, .dockerignore, {WRAPPER}"
    )
    assert run(capsys, "render", "--target", "cpu", "--check", "--config", config)[0] == 0
    code, out, _ = run(capsys, "render", "--all", "--config", config)  # the advice, as given
    assert code == 0 and out.splitlines()[0].endswith(
        f"; removed {project / 'docker' / 'old-gpu'}'s rendered files (not a target in the config)"
    )
    assert not (project / "docker" / "old-gpu").exists() and (project / "docker" / "notes" / "Dockerfile").exists()
    assert run(capsys, "render", "--all", "--check", "--config", config)[0] == 0


def test_a_link_to_a_rendered_file_is_the_users_and_never_removed(capsys, project):
    """Issue 39 §1 (every path envkit removes): a folder of docker/ that is no target, holding the user's link to
    the run wrapper, lost the link to render --all: the mark was read through it."""
    config = str(project / "envkit.yaml")
    assert run(capsys, "render", "--all", "--config", config)[0] == 0
    tools = project / "docker" / "tools"
    tools.mkdir()
    (tools / "envkit_run.py").symlink_to("../cpu/envkit_run.py")
    assert run(capsys, "render", "--all", "--check", "--config", config)[0] == 0
    code, out, _ = run(capsys, "render", "--all", "--config", config)
    assert code == 0 and "removed" not in out and os.readlink(tools / "envkit_run.py") == "../cpu/envkit_run.py"


@pytest.mark.parametrize("link", ["docker", "docker/cuda", "notebooks/colab-tpu"])
def test_render_never_writes_outside_the_project_through_a_link(capsys, project, tmp_path_factory, link):
    """Issue 39 §18: `ln -s /tmp/elsewhere docker; envkit render --all` wrote 27 files there."""
    config = str(project / "envkit.yaml")
    assert run(capsys, "render", "--all", "--config", config)[0] == 0
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    shutil.copytree(project / link, elsewhere, dirs_exist_ok=True)  # the folder moved out, its lock with it
    shutil.rmtree(project / link)
    (project / link).symlink_to(elsewhere)
    (elsewhere / "run.sh").unlink(missing_ok=True)  # stale files render would write there
    (elsewhere / "cpu" / "run.sh").unlink(missing_ok=True)
    for notebook in elsewhere.glob("*.ipynb"):
        notebook.unlink()
    before, there = files_under(project), files_under(elsewhere)
    code, out, err = run(capsys, "render", "--all", "--config", config)
    assert (code, out) == (2, "") and err.count("\n") == 1
    assert err.startswith(f"envkit: error: {project / link}") and f"a symbolic link takes it to {elsewhere}" in err
    assert files_under(elsewhere) == there and files_under(project) == before


@pytest.mark.parametrize("kept", ["NOTES.md", "requirements.lock"])
def test_render_all_keeps_what_it_did_not_write_in_a_removed_targets_directory(capsys, project, repo_root, kept):
    """render removes what it rendered and keeps what it did not: someone's notes, and the lock `envkit lock` wrote
    (render --all deleted it, and kept failing --check on what it kept)."""
    config = str(project / "envkit.yaml")
    assert run(capsys, "render", "--all", "--config", config)[0] == 0
    removed_target(project)
    shutil.copy(repo_root / "docker" / "tpu-vm" / "requirements.lock", project / "docker" / "old-gpu" / kept)
    code, out, _ = run(capsys, "render", "--all", "--check", "--config", config)
    assert code == 1 and out.splitlines()[-1].endswith(
        f"removes Dockerfile, run.sh, .dockerignore, {WRAPPER}; it keeps {kept}, which render did not write"
    )
    assert run(capsys, "render", "--all", "--config", config)[0] == 0
    assert sorted(p.name for p in (project / "docker" / "old-gpu").iterdir()) == [kept]
    assert run(capsys, "render", "--all", "--check", "--config", config)[0] == 0


def test_targets_lists_pins(capsys, repo_root):
    code, out, _ = run(capsys, "targets", "--config", str(repo_root / "envkit.yaml"))
    lines = out.splitlines()
    assert code == 0 and lines[0].split() == [
        "TARGET",
        "KIND",
        "BASE",
        "IMAGE",
        "OR",
        "NOTEBOOK",
        "RUNTIME",
        "LOCK",
        "PINS",
    ]
    tpu = next(line for line in lines if line.startswith("tpu-vm"))
    assert "torch=2.9.0" in tpu and "torch_xla=2.9.0" in tpu and "libtpu=0.0.21" in tpu
    sha = hashlib.sha256((repo_root / "docker" / "tpu-vm" / "requirements.lock").read_bytes()).hexdigest()
    assert f" locked {sha[:12]} " in tpu
    assert " unlocked " in next(line for line in lines if line.startswith("cpu "))


def test_targets_shows_a_stale_lock_as_stale_with_lock_checks_reason(capsys, project, repo_root):
    """Before: after `python: "3.12"` on tpu-vm, targets still said `locked <sha>` while lock --check said stale."""
    (project / "docker" / "tpu-vm").mkdir(parents=True)
    shutil.copy(repo_root / "docker" / "tpu-vm" / "requirements.lock", project / "docker" / "tpu-vm")
    config = project / "envkit.yaml"
    text = config.read_text()
    tpu = text.index("  tpu-vm:")
    config.write_text(text[:tpu] + text[tpu:].replace('python: "3.11"', 'python: "3.12"', 1))
    code, out, _ = run(capsys, "targets", "--config", str(config))
    sha = hashlib.sha256((repo_root / "docker" / "tpu-vm" / "requirements.lock").read_bytes()).hexdigest()
    tpu_row = next(line for line in out.splitlines() if line.startswith("tpu-vm"))
    assert code == 0 and f" stale {sha[:12]} " in tpu_row and "locked" not in tpu_row
    reason = "tpu-vm: stale: docker/tpu-vm/requirements.lock: its inputs changed since it was locked (envkit lock --target tpu-vm)"
    assert out.splitlines()[-1] == reason
    code, out, err = run(capsys, "lock", "--check", "--config", str(config))
    assert code == 1 and reason in out.splitlines()
    assert err == "envkit: error: locks are stale (tpu-vm): run `envkit lock --target tpu-vm` and commit\n"


def test_matrix_lists_supported_combinations(capsys):
    code, out, _ = run(capsys, "matrix")
    assert code == 0
    row = next(line for line in out.splitlines() if line.startswith("2.9.x"))
    assert "0.24.x" in row and "cu128* (12.8), cu126 (12.6), cu130 (13.0)" in row and row.endswith("torch_xla")
    assert "cu132* (13.2)" in next(line for line in out.splitlines() if line.startswith("2.15.x"))
    assert any(line.startswith("2.14.x") for line in out.splitlines())
    assert any(
        line.startswith("2.8.x") and "(2.8.0, 2.8.1)" in line and "libtpu 0.0.17" in line for line in out.splitlines()
    )
    assert any(
        line.startswith("0.2.0") and "2.11.0-2.15.0" in line and ">= 0.0.50" in line for line in out.splitlines()
    )


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            ('torch_xla: "2.9.0"', 'torch_xla: "2.8.0"'),
            "torch 2.9.0 with torch_xla 2.8.0 is not a released torch_xla pair",
        ),
        (('cuda: "12.8"', 'cuda: "12.4"'), "valid choices: 12.6, 12.8, 13.0"),
        (("kind: cpu", "kind: cpu\n    pyhton: '3.11'"), "did you mean 'python'?"),
        (('cuda: "12.8"', 'cuda: "12.8"\n    gpus: [0, x]'), "targets.cuda.gpus[1]"),
        (('cuda: "12.8"', 'cuda: "12.8"\n    apt_packages: ["git;id"]'), "targets.cuda.apt_packages[0]"),
        (("targets:", "targets: ["), "malformed YAML"),
    ],
)
def test_bad_config_is_one_line_exit_2_and_writes_nothing(capsys, project, edit, message):
    path = project / "envkit.yaml"
    path.write_text(path.read_text().replace(*edit))
    code, out, err = run(capsys, "render", "--all", "--config", str(path))
    assert (code, out) == (2, "")
    assert err.startswith("envkit: error: ") and err.count("\n") == 1 and message in err
    assert not (project / "docker").exists()


def test_unknown_target(capsys, repo_root):
    code, _, err = run(capsys, "render", "--target", "tpu", "--stdout", "--config", str(repo_root / "envkit.yaml"))
    assert code == 2 and "unknown target 'tpu'; targets in" in err and "cpu, cuda, tpu-vm" in err


def test_output_that_is_a_file(capsys, project):
    (project / "docker").write_text("not a directory")
    code, _, err = run(capsys, "render", "--all", "--config", str(project / "envkit.yaml"))
    assert code == 2 and "is a file" in err
    assert (project / "docker").read_text() == "not a directory"


def test_render_needs_target_or_all(capsys, repo_root):
    with pytest.raises(SystemExit) as caught:
        main(["render", "--config", str(repo_root / "envkit.yaml")])
    assert caught.value.code == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_render_imports_no_torch_docker_or_matplotlib(repo_root):
    probe = (
        "import sys, json; from envkit.cli import main; code = main(['render', '--all', '--check']);"
        "print(json.dumps([code, sorted(m for m in sys.modules if m.split('.')[0] in"
        " ('torch', 'torchvision', 'docker', 'matplotlib', 'tqdm', 'numpy'))]))"
    )
    result = subprocess.run([sys.executable, "-c", probe], cwd=repo_root, capture_output=True, text=True)
    code, heavy = json.loads(result.stdout.splitlines()[-1])
    assert (code, heavy) == (0, [])


def test_console_script_error_has_no_traceback(tmp_path):
    (tmp_path / "envkit.yaml").write_text("targets:\n  cpu: {kind: cpu, torch: '1.0.0'}\n")
    result = subprocess.run(
        [sys.executable, "-m", "envkit", "render", "--all"], cwd=tmp_path, capture_output=True, text=True
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr == (
        "envkit: error: envkit.yaml:2: targets.cpu.torch: torch 1.0.0 is not in envkit's matrix; supported: "
        "2.1.x, 2.2.x, 2.3.x, 2.4.x, 2.5.x, 2.6.x, 2.7.x, 2.8.x, 2.9.x, 2.10.x, 2.11.x, 2.12.x, 2.13.x, 2.14.x, 2.15.x\n"
    )


@pytest.mark.parametrize("key", ["pip_index_url", "find_links"])
@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("https://ci:Xk7pQ2vR9tok@pkgs.example.org/simple", "a password in a URL"),
        ("https://Xk7pQ2vR9tok@pkgs.example.org/me/", "a token as a URL's user"),
        ("https://pkgs.example.org/simple?token=Xk7pQ2vR9tok", "a token in a URL's query"),
    ],
)
def test_an_index_url_with_a_password_is_never_rendered_unless_listed(capsys, project, key, url, why):
    """Before: pip_index_url: https://ci:<token>@pkgs.example.org/simple went as is into docker/cpu/Dockerfile's
    ARG PIP_INDEX_URL default, which is committed and stays in every image's build history; a token as the URL's
    user (https://TOKEN@host/) or in its query (?token=) still did after user:password@ was refused."""
    config = project / "envkit.yaml"
    password = "Xk7pQ2vR9tok"
    text = config.read_text().replace(
        "  cpu:\n    kind: cpu\n",
        f"  cpu:\n    kind: cpu\n    {key}: {repr(url) if key == 'pip_index_url' else [url]}\n",
        1,
    )
    config.write_text(text)
    code, out, err = run(capsys, "render", "--target", "cpu", "--config", str(config))
    assert (code, out) == (2, "") and err.count("\n") == 1 and password not in err, err
    assert err.startswith(
        f"envkit: error: {config}: targets/cpu/{key}{'/0' if key == 'find_links' else ''} holds {why}"
    )
    assert not (project / "docker").exists()
    config.write_text("include_secrets: [envkit.yaml]\n" + text)  # the one way in
    assert run(capsys, "render", "--target", "cpu", "--config", str(config))[0] == 0
    assert password in (project / "docker" / "cpu" / "Dockerfile").read_text()


def test_a_render_after_a_lock_changed_imports_only_what_it_uses(tmp_path, repo_root):
    """Issue 42: on a cold cache and a memo miss, render parses no requirement with packaging (the project's
    requirements pin torch, which must allow the target's), checks envkit.yaml without jsonschema, and loads
    neither the run wrapper, doctor nor the run plans, nor platform (only a host lock asks which host this is), nor
    detect-secrets (envkit ships its patterns), subprocess, tarfile or zipfile (only listing files needs them); and
    once envkit.yaml was read, PyYAML neither."""
    project = tmp_path / "project"
    shutil.copytree(repo_root / "tests" / "example_project", project)
    (project / "envkit.yaml").write_text(
        "requirements: requirements.txt\ntargets:\n  cuda: {kind: cuda, torch: '2.9.0', pip_packages: ['rich>=13,<14']}\n"
    )
    watched = (
        "packaging",
        "jsonschema",
        "difflib",
        "platform",
        "envkit.support.provenance",
        "envkit.host",
        "envkit.runs",
        "detect_secrets",
        "subprocess",
        "tarfile",
        "zipfile",
    )

    def imported(watched: tuple[str, ...]) -> tuple[subprocess.CompletedProcess, list]:
        probe = (
            "import sys, json; from envkit.cli import main; code = main(['render', '--target', 'cuda', '--stdout']);"
            f"print(json.dumps([code, sorted(m for m in sys.modules if m == 'envkit.support.provenance' or "
            f"m.split('.')[0] in {watched!r} or m.rsplit('.', 1)[0] in {watched!r})]), file=sys.stderr)"
        )
        env = {**os.environ, "ENVKIT_CACHE_DIR": str(tmp_path / "cache")}
        result = subprocess.run([sys.executable, "-c", probe], cwd=project, capture_output=True, text=True, env=env)
        return result, json.loads(result.stderr.splitlines()[-1])

    result, found = imported(watched)
    assert found == [0, []], result.stderr
    assert "FROM " in result.stdout and "rich>=13,<14" in result.stdout
    # Again after the lock changed (the memo misses): envkit.yaml and envkit's own tables are read without PyYAML.
    shutil.rmtree(tmp_path / "cache" / "render-memo")
    again, found = imported((*watched, "yaml"))
    assert found == [0, []] and again.stdout == result.stdout, again.stderr
