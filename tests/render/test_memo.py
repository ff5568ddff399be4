"""The render memo: an unchanged project renders from memory, and any change to what a render read renders again."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from paths import REPO_ROOT

from envkit.render import memo
from envkit.render.output import RenderedFile


@pytest.fixture()
def project(tmp_path, monkeypatch):
    """A copy of the repository's config, templates and rendered files (notebooks with their locks and
    recipes included), with its own cache."""
    copy = tmp_path / "project"
    copy.mkdir()
    shutil.copy(REPO_ROOT / "envkit.yaml", copy / "envkit.yaml")
    for folder in ("templates", "docker", "notebooks", "recipes"):
        shutil.copytree(REPO_ROOT / folder, copy / folder, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setenv("ENVKIT_CACHE_DIR", str(tmp_path / "cache"))
    return copy


def render(project: Path, *args: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    """`envkit render ARGS` in a fresh process; also which of jinja2 and yaml it imported."""
    probe = (
        "import json, sys; from envkit.cli import main;"
        f"code = main(['render', '--config', {str(project / 'envkit.yaml')!r}, *{list(args)!r}]);"
        "print(json.dumps(sorted(m for m in ('jinja2', 'yaml', 'jsonschema') if m in sys.modules))); sys.exit(code)"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=os.environ, cwd=REPO_ROOT)
    lines = done.stdout.splitlines()
    return done, (json.loads(lines[-1]) if lines else [])


def test_an_unchanged_project_renders_from_the_memo_without_jinja_or_yaml(project):
    first, imported = render(project, "--all", "--output", str(project / "a"))
    assert first.returncode == 0 and "jinja2" in imported
    again, imported = render(project, "--all", "--output", str(project / "b"))
    assert again.returncode == 0 and imported == []
    for path in (project / "a").rglob("*"):
        twin = project / "b" / path.relative_to(project / "a")
        assert path.is_dir() or (twin.read_bytes() == path.read_bytes() and twin.stat().st_mode == path.stat().st_mode)


@pytest.mark.parametrize("change", ["config", "template", "lock", "certificate"])
def test_a_change_to_anything_the_render_read_renders_again(project, change):
    render(project, "--all", "--check")
    if change == "config":
        with open(project / "envkit.yaml", "a") as handle:
            handle.write("# a comment changes no output, but the memo cannot know that without YAML\n")
    elif change == "template":
        with open(project / "templates" / "Dockerfile.j2", "a") as handle:
            handle.write("# one more line\n")
    elif change == "lock":
        (project / "docker" / "tpu-vm" / "requirements.lock").unlink()
    else:
        (project / "extra.crt").write_text((REPO_ROOT / "tests" / "golden" / "proxy.crt").read_text())
        text = (project / "envkit.yaml").read_text()
        (project / "envkit.yaml").write_text(
            text.replace("  cpu:\n    kind: cpu\n", "  cpu:\n    kind: cpu\n    ca_certificates: [extra.crt]\n")
        )
        render(project, "--all", "--output", str(project / "out"))
        (project / "extra.crt").unlink()
    done, imported = render(project, "--all", "--output", str(project / "fresh"))
    assert "jinja2" in imported or done.returncode == 2, (change, imported)
    if change == "certificate":
        assert done.returncode == 2 and "extra.crt is not a file" in done.stderr
    elif change == "template":
        assert (project / "fresh" / "cpu" / "Dockerfile").read_text().endswith("# one more line\n")


def test_errors_are_never_remembered(project):
    (project / "envkit.yaml").write_text("targets: {cpu: {kind: nope}}\n")
    for _ in range(2):
        done, _ = render(project, "--all", "--check")
        assert done.returncode == 2 and done.stderr.startswith("envkit: error:")


def test_a_damaged_memo_is_a_miss(tmp_path, monkeypatch):
    monkeypatch.setenv("ENVKIT_CACHE_DIR", str(tmp_path / "cache"))
    read = tmp_path / "input"
    read.write_text("a")
    files = [RenderedFile(Path("t/Dockerfile"), "FROM x\n", 0o644)]
    memo.remember(tmp_path / "envkit.yaml", "--all", ["t"], files, [read])
    assert memo.recall(tmp_path / "envkit.yaml", "--all") == (["t"], files)
    assert memo.recall(tmp_path / "envkit.yaml", "t") is None  # another selection
    read.write_text("b")
    assert memo.recall(tmp_path / "envkit.yaml", "--all") is None
    read.write_text("a")
    code = tmp_path / "code"
    code.mkdir()
    (code / "module.py").write_text("A = 1\n")
    monkeypatch.setattr(memo, "PACKAGE", code)
    memo.remember(tmp_path / "envkit.yaml", "--all", ["t"], files, [read])
    assert memo.recall(tmp_path / "envkit.yaml", "--all") == (["t"], files)
    (code / "module.py").write_text("A = 2\n")  # envkit's own code changed
    assert memo.recall(tmp_path / "envkit.yaml", "--all") is None
    entry = next((tmp_path / "cache" / "render-memo").iterdir())
    entry.write_text("{not json")
    assert memo.recall(tmp_path / "envkit.yaml", "--all") is None
