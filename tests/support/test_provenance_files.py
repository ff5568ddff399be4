"""The files a run leaves in an image's project folder (issue 32 §8): what the command created or changed there,
which would vanish with the container, is copied into the run's folder and listed in the record (path, size,
sha256); what it could not copy is named, bounded like the wrapper's other reads (issue 33 §8). A temporary folder
stands for the image's /workspace/project (ENVKIT_CONTAINER_PROJECT, which the image sets); a host run copies
nothing.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
from paths import REPO_ROOT
from results_contract import assert_valid_results

from envkit.support import provenance, provenance_files

WRAPPER = Path(provenance.__file__)
SAVES = """import os, pathlib, sys, types
sys.modules["dvclive"] = types.ModuleType("dvclive")  # stands in for dvclive, whose ./dvclive the wrapper reads
pathlib.Path("snapshot.pt").write_bytes(b"weights" * 1000)
live = pathlib.Path("dvclive", "plots", "metrics")
live.mkdir(parents=True, exist_ok=True)
pathlib.Path("dvclive", "metrics.json").write_text('{"acc": 0.9}')
(live / "acc.tsv").write_text("step\\tacc\\n0\\t0.5\\n1\\t0.9\\n")
pathlib.Path("notes", "old.txt").write_text("changed by the run")
"""


def project(tmp_path: Path, body: str) -> Path:
    """A project folder as the image holds it: its script, an old file, git's folder and a venv."""
    folder = tmp_path / "project"
    (folder / "notes").mkdir(parents=True)
    (folder / "notes" / "old.txt").write_text("from the build")
    (folder / "notes" / "kept.txt").write_text("never touched")
    (folder / "train.py").write_text(body)
    for ignored in (".git", "venv", "__pycache__"):
        (folder / ignored).mkdir()
    (folder / "venv" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    return folder


def wrapped(folder: Path, results: Path, *, in_image: bool = True) -> tuple[subprocess.CompletedProcess, dict]:
    env = {**os.environ, "ENVKIT_RESULTS_DIR": str(results)}
    env.pop(provenance_files.PROJECT_VARIABLE, None)
    if in_image:
        env[provenance_files.PROJECT_VARIABLE] = str(folder)
    done = subprocess.run(
        [sys.executable, str(WRAPPER), sys.executable, "train.py"],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert "Traceback" not in done.stderr, done.stderr
    (record,) = [assert_valid_results(path) for path in sorted(results.glob("*.json"))]
    return done, record


def test_what_a_run_writes_in_the_image_s_project_reaches_the_run_s_folder_with_its_size_and_sha256(tmp_path):
    litter = (
        "\nfor folder in ('.git', 'venv', '__pycache__', 'results'):\n    pathlib.Path(folder, 'x').write_text('no')\n"
    )
    folder = project(tmp_path, SAVES + litter)
    done, record = wrapped(folder, folder / "results")  # results inside the project: never copied into itself
    kept = record["run"]["project_files"]
    assert done.returncode == 0 and kept["project"] == str(folder) and kept["left_out"] == []
    paths = ["dvclive/metrics.json", "dvclive/plots/metrics/acc.tsv", "notes/old.txt", "snapshot.pt"]
    assert [entry["path"] for entry in kept["copied"]] == paths
    for entry in kept["copied"]:
        data = (folder / entry["path"]).read_bytes()
        assert entry["copy"] == f"{record['run_name']}/files/{entry['path']}"
        assert (folder / "results" / entry["copy"]).read_bytes() == data
        assert (entry["size"], entry["sha256"]) == (len(data), hashlib.sha256(data).hexdigest())
    assert record["metrics"] == {"acc": 0.9}  # dvclive's files are read as before, and kept as well


def test_a_host_run_copies_nothing(tmp_path):
    folder = project(tmp_path, SAVES)
    done, record = wrapped(folder, tmp_path / "results", in_image=False)
    assert done.returncode == 0 and "project_files" not in record["run"]
    assert not (tmp_path / "results" / record["run_name"]).exists()


def test_links_fifos_and_linked_folders_are_named_never_followed_and_the_status_is_kept(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "credentials.json").write_text("secret")
    body = f"""import os, pathlib, sys
os.symlink({str(outside / "credentials.json")!r}, "latest.pt")
os.mkfifo("progress")
os.symlink({str(outside)!r}, "linked")
pathlib.Path({str(outside / "new.txt")!r}).write_text("written outside the project")
pathlib.Path("saved.pt").write_bytes(b"w")
sys.exit(7)
"""
    folder = project(tmp_path, body)
    done, record = wrapped(folder, tmp_path / "results")
    kept = record["run"]["project_files"]
    assert done.returncode == 7 and record["run"]["exit_status"] == 7
    assert [entry["path"] for entry in kept["copied"]] == ["saved.pt"]
    assert kept["left_out"] == [
        "latest.pt: a symbolic link, not followed",
        "linked: a symbolic link, not followed",
        "progress: a FIFO, not a regular file",
    ]
    copies = tmp_path / "results" / record["run_name"] / "files"
    assert sorted(path.name for path in copies.rglob("*")) == ["saved.pt"]
    assert "latest.pt: a symbolic link, not followed: not kept" in done.stderr


def test_a_files_folder_the_program_made_a_link_is_not_written_through(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    body = f"""import os, pathlib
os.symlink({str(elsewhere)!r}, pathlib.Path(os.environ["ENVKIT_METRICS_DIR"], "files"))
pathlib.Path("saved.pt").write_bytes(b"w")
"""
    done, record = wrapped(project(tmp_path, body), tmp_path / "results")
    kept = record["run"]["project_files"]
    assert done.returncode == 0 and kept["copied"] == [] and list(elsewhere.iterdir()) == []
    assert kept["left_out"] == ["saved.pt: files: a symbolic link, not followed"]


def test_a_folder_swapped_for_a_link_after_the_walk_is_not_followed_out_of_the_project(tmp_path, monkeypatch):
    folder = project(tmp_path, "")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "old.txt").write_text("secret")
    watched = provenance_files.Watch(folder, set())
    (folder / "notes" / "old.txt").write_text("changed")
    changed = watched.changed()
    assert changed == (["notes/old.txt"], [])
    (folder / "notes").rename(folder / "gone")  # after the walk, before the copy (a child still running)
    (folder / "notes").symlink_to(outside)
    monkeypatch.setattr(watched, "changed", lambda: changed)
    run_folder = tmp_path / "results" / "run"
    run_folder.mkdir(parents=True)
    kept = provenance_files.keep(watched, run_folder, tmp_path / "results")
    assert kept["copied"] == [] and kept["left_out"] == ["notes/old.txt: notes: a symbolic link, not followed"]


def test_past_the_count_and_byte_limits_files_are_left_out_and_named(tmp_path, monkeypatch):
    monkeypatch.setattr(provenance_files, "MAX_FILES", 2)
    monkeypatch.setattr(provenance_files, "MAX_BYTES", 10)
    folder = project(tmp_path, "")
    watched = provenance_files.Watch(folder, set())
    for name, size in (("a.pt", 4), ("b.pt", 8), ("c.pt", 6), ("d.pt", 1)):
        (folder / name).write_bytes(b"x" * size)
    run_folder = tmp_path / "results" / "run"
    run_folder.mkdir(parents=True)
    kept = provenance_files.keep(watched, run_folder, tmp_path / "results")
    assert [entry["path"] for entry in kept["copied"]] == ["a.pt", "c.pt"]
    assert kept["left_out"] == [
        "b.pt: 8 bytes, more than the 6 bytes left of the 10 a run keeps",
        "d.pt: past 2 files, more than a run keeps",
    ]


def test_the_walk_is_bounded_in_entries_and_depth_and_says_what_it_did_not_compare(tmp_path, monkeypatch):
    monkeypatch.setattr(provenance_files, "MAX_ENTRIES", 5)
    monkeypatch.setattr(provenance_files, "MAX_DEPTH", 2)
    folder = tmp_path / "project"
    (folder / "a" / "b" / "c").mkdir(parents=True)
    watched = provenance_files.Watch(folder, set())
    (folder / "a" / "b" / "c" / "deep.pt").write_bytes(b"w")
    assert watched.changed() == ([], ["a/b/c: past 2 folders deep: not compared"])
    for number in range(6):
        (folder / f"{number}.pt").write_bytes(b"w")
    changed, notes = watched.changed()
    assert changed == ["0.pt", "1.pt", "2.pt", "3.pt", "4.pt"]
    assert notes == [f"{folder}: past 5 entries: the rest not compared"]


def test_mounted_and_named_folders_are_not_entered(tmp_path):
    folder = project(tmp_path, "")
    (folder / "data").mkdir()
    info = os.stat(folder / "data")
    watched = provenance_files.Watch(folder, {(info.st_dev, info.st_ino)})
    (folder / "data" / "mnist.bin").write_bytes(b"d")
    (folder / "venv" / "lib.py").write_text("x")
    assert watched.changed() == ([], [])


@pytest.mark.parametrize("dockerfile", sorted(REPO_ROOT.glob("docker/*/Dockerfile")), ids=lambda path: path.parent.name)
def test_every_image_names_its_project_folder_for_the_wrapper(dockerfile):
    text = dockerfile.read_text(encoding="utf-8")
    assert f"ENV {provenance_files.PROJECT_VARIABLE}=/workspace/project\n" in text
    assert "WORKDIR /workspace/project\n" in text


def test_a_file_name_that_is_not_utf8_is_copied_under_its_own_bytes(tmp_path):
    folder = project(tmp_path, "open(b'w\\xff.pt', 'wb').write(b'x')\n")
    done, record = wrapped(folder, tmp_path / "results")
    (entry,) = record["run"]["project_files"]["copied"]
    assert done.returncode == 0 and entry["path"] == os.fsdecode(b"w\xff.pt")
    assert (tmp_path / "results" / entry["copy"]).read_bytes() == b"x"
