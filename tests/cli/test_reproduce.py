"""`envkit reproduce` (issue 43) end to end on the host: a tiny project in a git clone, its runs recorded by
`envkit experiment --python`, run again from the recorded revision in a worktree and judged."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from envkit.cli import main

GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "commit.gpgsign=false"]
CONFIG = """experiments:
  train:
    summary: train.py
    command: [python, train.py]
    targets: [cpu, cpu-2]
    reproduce: {accuracy: 0.05}
targets:
  cpu:
    kind: cpu
    torch: "2.14.1"
    python: "3.11"
  cpu-2:
    kind: cpu
    torch: "2.14.1"
    python: "3.11"
"""
# The user's program: its metric follows its --seed, and an offset file in its data folder (untracked) moves it.
TRAIN = """import json, os, sys
from pathlib import Path
seed = int(sys.argv[sys.argv.index("--seed") + 1])
offset = Path(os.environ.get("ENVKIT_DATA_DIR", "data"), "offset")
offset = float(offset.read_text()) if offset.exists() else 0.0
Path(os.environ["ENVKIT_METRICS_DIR"], "metrics.json").write_text(json.dumps({"accuracy": 0.5 + seed / 100 + offset}))
"""


def git(root: Path, *argv: str) -> str:
    return subprocess.run([*GIT, *argv], cwd=root, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def project(tmp_path, monkeypatch) -> Path:
    """The project committed, two runs of `train -- --seed 3` recorded in results/, envkit run from its root."""
    root = tmp_path / "project"
    root.mkdir()
    (root / "envkit.yaml").write_text(CONFIG)
    (root / "train.py").write_text(TRAIN)
    (root / ".gitignore").write_text("results/\ndata/\n")
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "project")
    monkeypatch.chdir(root)
    for _ in range(2):
        assert (
            main(["experiment", "train", "--python", sys.executable, "--results-dir", "results", "--", "--seed", "3"])
            == 0
        )
    # Wall times spread wide, so a busy test host's timing never decides a verdict here (the wall-time rule has its
    # own tests in tests/runs/test_reproduce.py).
    for path, wall in zip(records(root / "results"), (0.01, 5.0), strict=True):
        document = json.loads(path.read_text())
        document["run"]["wall_time_s"] = wall
        path.write_text(json.dumps(document))
    return root


def tree(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.rglob("*") if p.is_file()
    }


def records(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.json"))


def edit(path: Path, **environment) -> None:
    document = json.loads(path.read_text())
    document["environment"] |= environment
    path.write_text(json.dumps(document))


def worktrees(root: Path) -> int:
    return git(root, "worktree", "list").count("\n")


def test_a_host_run_is_reproduced_from_its_results_folder(project, capsys):
    original = tree(project / "results")
    assert main(["reproduce", "results", "--results-dir", "again"]) == 0
    out = capsys.readouterr().out
    assert "## train on cpu, arguments `--seed 3`: reproduced" in out
    assert "| accuracy | 0.53 ± 0 (n=2) | 0.53 ± 0 (n=2) | +0 | 0.05 (declared) | held |" in out
    assert "2 run(s) of envkit experiment train --config <worktree>/envkit.yaml --results-dir " in out
    assert (project / "again" / "reproduction.md").read_text() == out
    page = (project / "again" / "reproduction.html").read_text()
    assert "<title>envkit reproduce: the original and its reproduction</title>" in page and "<script" not in page
    assert "train on cpu, arguments `--seed 3`: reproduced." in page
    # Both rows, whenever the reproduction started: in the original's second its run name and start are the same
    assert "<td>original</td>" in page and "<td>reproduction</td>" in page
    assert len(records(project / "again")) == 2
    reproduced = json.loads(records(project / "again")[0].read_text())
    assert reproduced["environment"]["git_revision"] == git(project, "rev-parse", "HEAD").strip()
    assert reproduced["environment"]["git_dirty"] is False
    assert tree(project / "results") == original  # nothing of the original touched
    assert worktrees(project) == 1  # the temporary worktree is gone


def test_the_page_of_the_report_is_reproduced(project, capsys):
    assert main(["report", "results", "--html", "page.html"]) == 0
    capsys.readouterr()
    assert main(["reproduce", "page.html", "--results-dir", "again"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# Reproduction of page.html\n") and "`--seed 3`: reproduced\n" in out
    assert len(records(project / "again")) == 2


def test_a_result_that_moved_differs_and_says_what(project, capsys):
    """An original whose metric lies past the declared tolerance from what the revision gives."""
    first = records(project / "results")[0]
    document = json.loads(first.read_text())
    document["metrics"]["accuracy"] = 0.63
    first.write_text(json.dumps(document))
    assert main(["reproduce", str(first), "--runs", "2", "--results-dir", "again"]) == 1
    out = capsys.readouterr().out
    assert "## train on cpu, arguments `--seed 3`: differs: accuracy -0.1 (tolerance 0.05)" in out
    assert len(records(project / "again")) == 2


def test_another_target_runs_there_and_expects_a_difference(project, capsys):
    assert main(["reproduce", "results", "--target", "cpu-2", "--runs", "1", "--results-dir", "again"]) == 0
    assert "Note: reproduced on another target (cpu-2; the original ran on cpu)" in capsys.readouterr().out
    assert json.loads(records(project / "again")[0].read_text())["run"]["target"] == "cpu-2"


def test_the_clones_data_folder_is_the_reproductions_data(project, capsys):
    """data/ is not tracked, so not in the worktree: the runs are told the clone's."""
    (project / "data").mkdir()
    (project / "data" / "offset").write_text("0.1")
    assert main(["reproduce", "results", "--results-dir", "again"]) == 1
    out = capsys.readouterr().out
    assert f"--data-dir {project / 'data'} " in out
    assert "## train on cpu, arguments `--seed 3`: differs: accuracy +0.1 (tolerance 0.05)\n" in out


def test_dry_run_prints_the_plan_and_runs_nothing(project, capsys):
    assert main(["reproduce", "results", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# 1. train on cpu, arguments `--seed 3`: the project at ")
    assert out.endswith("--target cpu -- --seed 3\n") and out.count("\n") == 1
    assert sorted(path.name for path in (project / "results").iterdir() if path.suffix != ".json") == sorted(
        path.stem for path in records(project / "results")
    )  # no reproduce-* folder
    assert worktrees(project) == 1


@pytest.mark.parametrize(
    ("environment", "expected"),
    [
        ({"git_dirty": True}, "it ran on a work tree with uncommitted changes at "),
        ({"git_revision": "ab" * 20}, "revision abababababab is not in the clone at "),
        ({"git_revision": None}, "the record names no git revision"),
    ],
)
def test_a_record_that_cannot_be_run_again_is_one_line(project, capsys, environment, expected):
    before = tree(project)
    for path in records(project / "results"):
        edit(path, **environment)
    changed = tree(project)
    assert main(["reproduce", "results"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("envkit: error: ") and err.count("\n") == 1 and expected in err
    assert tree(project) == changed != before and worktrees(project) == 1


def test_a_page_says_where_to_fetch_a_revision_the_clone_lacks(project, capsys):
    git(project, "remote", "add", "origin", "https://git.example.com/team/project.git")
    for path in records(project / "results"):
        edit(path, git_revision="ab" * 20)
    assert main(["report", "results", "--html", "page.html"]) == 0
    capsys.readouterr()
    assert main(["reproduce", "page.html"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert f"git fetch https://git.example.com/team/project.git {'ab' * 20} and run again" in err


def test_the_users_own_worktree_on_an_absent_disk_is_never_pruned(project, capsys):
    """Before: reproduce ran `git worktree prune`, which forgets every worktree whose folder is away."""
    git(project, "worktree", "add", "-q", "--detach", str(project.parent / "away"))
    (project.parent / "away").rename(project.parent / "unmounted")
    assert main(["reproduce", "results", "--results-dir", "again"]) == 0
    assert str(project.parent / "away") in git(project, "worktree", "list")


def test_the_worktree_is_removed_when_the_experiment_is_gone_at_the_revision(project, capsys):
    config = project / "envkit.yaml"
    config.write_text(CONFIG.replace("  train:", "  fit:"))
    git(project, "commit", "-q", "-am", "renamed")
    for path in records(project / "results"):
        edit(path, git_revision=git(project, "rev-parse", "HEAD").strip())
    assert main(["reproduce", "results", "--results-dir", "again"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "train" in err and worktrees(project) == 1


LOCK = "# envkit lock\ntabulate==0.9.0 \\\n    --hash=sha256:" + "a" * 64 + "\n"
DIGEST = "sha256:" + "2" * 64


def image_records(project: Path, pushed: bool) -> None:
    """The records made image runs of the cpu target at a revision that holds its lock (and its push)."""
    folder = project / "docker" / "cpu"
    folder.mkdir(parents=True)
    (folder / "requirements.lock").write_text(LOCK)
    if pushed:
        from envkit.image.pushed import Pushed, record

        record(folder, "cpu", [Pushed("reg.example:5000/envkit-cpu", "latest", DIGEST, "sha256:" + "1" * 64)])
    git(project, "add", "-A")
    git(project, "commit", "-q", "-m", "locked")
    for path in records(project / "results"):
        edit(
            path,
            git_revision=git(project, "rev-parse", "HEAD").strip(),
            image="envkit-cpu:latest",
            image_id="sha256:" + "1" * 64,
            lock_sha256=hashlib.sha256(LOCK.encode()).hexdigest(),
        )


def test_an_image_run_without_an_engine_runs_in_a_venv_of_its_lock(project, capsys, monkeypatch):
    image_records(project, pushed=True)
    monkeypatch.setattr("envkit.cli.reproduce._engine", lambda: None)
    assert main(["reproduce", "results", "--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith(
        "no Docker engine here: a host venv from the lock "
        f"{hashlib.sha256(LOCK.encode()).hexdigest()[:12]} (its push is not pulled without an engine: "
        f"reg.example:5000/envkit-cpu@{DIGEST})"
    )
    assert lines[1].endswith(": envkit venv cpu --path <temporary venv>")
    assert "2 run(s) of envkit experiment train --config <worktree>/envkit.yaml" in lines[2]
    assert "/venv/bin/python --target cpu -- --seed 3" in lines[2]
    assert worktrees(project) == 1


class Images:
    def __init__(self, error: Exception | None = None):
        self.error, self.pulled = error, []

    def pull(self, reference):
        self.pulled.append(reference)
        if self.error:
            raise self.error


class Engine:
    def __init__(self, error: Exception | None = None):
        self.images = Images(error)


def test_an_image_run_pushed_from_the_revision_is_pulled_by_digest_and_run_without_a_build(
    project, capsys, monkeypatch
):
    image_records(project, pushed=True)
    monkeypatch.setattr("envkit.cli.reproduce._engine", Engine)
    assert main(["reproduce", "results", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert f"the recorded image by digest: reg.example:5000/envkit-cpu@{DIGEST}" in out
    assert f"docker pull reg.example:5000/envkit-cpu@{DIGEST}, then 2 time(s):" in out
    assert f"IMAGE=reg.example:5000/envkit-cpu@{DIGEST}" in out and "/docker/cpu/run.sh python train.py --seed 3" in out
    assert "build" not in out


def test_a_registry_that_does_not_answer_is_one_line(project, capsys, monkeypatch):
    import docker

    image_records(project, pushed=True)
    engine = Engine(docker.errors.APIError("500 Server Error: connection refused\nmore"))
    monkeypatch.setattr("envkit.cli.reproduce._engine", lambda: engine)
    monkeypatch.setattr("envkit.host.doctor.require", lambda *args: None)
    assert main(["reproduce", "results", "--results-dir", "again"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert f"cannot pull reg.example:5000/envkit-cpu@{DIGEST}: its registry did not answer (500 Server" in err
    assert engine.images.pulled == [f"reg.example:5000/envkit-cpu@{DIGEST}"]
    assert not (project / "again").exists() and worktrees(project) == 1


@pytest.mark.slow
def test_envkit_reproduce_runs_a_host_record_end_to_end_as_a_user_runs_it(project):
    """The console command, in another clone: the record is all it is given; the clone's uncommitted change is
    never what runs."""
    clone = project.parent / "clone"
    git(project.parent, "clone", "-q", str(project), str(clone))
    record = records(project / "results")[0]
    command = [sys.executable, "-m", "envkit", "reproduce", str(record), "--results-dir", "again"]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    done = subprocess.run(command, cwd=clone, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert ": reproduced\n" in done.stdout and (clone / "again" / "reproduction.md").is_file()
    (clone / "train.py").write_text(TRAIN.replace("0.5 +", "0.9 +"))  # the clone's own change, not committed
    moved = subprocess.run([*command[:-1], "moved"], cwd=clone, capture_output=True, text=True, env=env, timeout=300)
    assert moved.returncode == 0, moved.stderr  # the revision's train.py ran, not the clone's
    assert ": reproduced\n" in moved.stdout


@pytest.mark.slow
def test_an_image_run_without_an_engine_runs_again_in_a_host_venv_of_its_lock(project, capsys, monkeypatch):
    """The venv path for real: the revision's cpu lock (a made-up wheel, served on 127.0.0.1 with a stand-in for
    PyTorch's pages) installed by envkit venv, the runs started with its interpreter, which records the lock."""
    from wheel_index import IndexServer

    from envkit.lock.inputs import lock_inputs
    from envkit.project.load import load_config

    monkeypatch.setenv("UV_CACHE_DIR", str(project.parent / "uv-cache"))
    monkeypatch.setattr("envkit.cli.reproduce._engine", lambda: None)
    with IndexServer(project.parent / "www") as server:
        index, torch = server.index("simple"), server.index("torch-mirror")
        sha = index.add("envkit-probe-a", "1.0")
        for name in ("torch", "torchvision"):
            torch.add(name, "0.0.1")
        config = project / "envkit.yaml"
        config.write_text(
            CONFIG.replace('    python: "3.11"\n', f'    python: "3.11"\n    pip_index_url: {index.url}\n', 1)
        )
        digest = lock_inputs(load_config(config).target("cpu")).digest()
        python = "{}.{}".format(*sys.version_info[:2])
        lock = f"# envkit lock\n# inputs-sha256: {digest}\n# platform: x86_64-manylinux_2_36, python {python}\n"
        lock += f"envkit-probe-a==1.0 \\\n    --hash=sha256:{sha}\n"
        (project / "docker" / "cpu").mkdir(parents=True)
        (project / "docker" / "cpu" / "requirements.lock").write_text(lock)
        git(project, "add", "-A")
        git(project, "commit", "-q", "-m", "locked")
        revision = git(project, "rev-parse", "HEAD").strip()
        lock_sha = hashlib.sha256(lock.encode()).hexdigest()
        for path in records(project / "results"):
            edit(path, git_revision=revision, image="envkit-cpu:latest", lock_sha256=lock_sha)
        argv = ["reproduce", "results", "--runs", "1", "--results-dir", "again", "--torch-index-url", torch.url]
        code = main(argv)
    out = capsys.readouterr().out
    assert out.startswith("# Reproduction of results\n")
    assert f"no Docker engine here: a host venv from the lock {lock_sha[:12]}" in out
    (reproduced,) = (json.loads(path.read_text()) for path in records(project / "again"))
    assert reproduced["environment"]["lock_sha256"] == lock_sha
    assert "envkit-probe-a==1.0" in reproduced["environment"]["distributions"]
    assert reproduced["run"]["exit_status"] == 0 and reproduced["metrics"] == {"accuracy": 0.53}
    # The original ran on another interpreter's packages: said, and the verdict is not "reproduced".
    assert code == 1 and ": differs: environment: versions: - torch 2.14.1 (only in A); " in out
    assert "; environment: python packages: " in out and worktrees(project) == 1
