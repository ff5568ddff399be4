"""The render memo: an unchanged project renders from memory, and any change to what a render read renders again."""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from paths import REPO_ROOT

from envkit.render import memo
from envkit.support import bounded_load


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


# What a render from the memo need not import: the render's own libraries, and dataclasses (with inspect) and
# tempfile (with random), which a remembered render spent about 14 ms of CPU on, and shlex, 0.25 ms (issue 42).
WATCHED = ("jinja2", "yaml", "jsonschema", "dataclasses", "tempfile", "shlex")


def render(project: Path, *args: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    """`envkit render ARGS` in a fresh process; also which of WATCHED it imported."""
    probe = (
        "import json, sys; from envkit.cli import main;"
        f"code = main(['render', '--config', {str(project / 'envkit.yaml')!r}, *{list(args)!r}]);"
        f"print(json.dumps(sorted(m for m in {WATCHED!r} if m in sys.modules))); sys.exit(code)"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=os.environ, cwd=REPO_ROOT)
    lines = done.stdout.splitlines()
    return done, (json.loads(lines[-1]) if lines else [])


def test_an_unchanged_project_renders_from_the_memo_without_jinja_yaml_dataclasses_tempfile_or_shlex(project):
    first, imported = render(project, "--all", "--output", str(project / "a"))
    assert first.returncode == 0 and "jinja2" in imported
    again, imported = render(project, "--all", "--output", str(project / "b"))
    assert again.returncode == 0 and imported == []
    for path in (project / "a").rglob("*"):
        twin = project / "b" / path.relative_to(project / "a")
        assert path.is_dir() or (twin.read_bytes() == path.read_bytes() and twin.stat().st_mode == path.stat().st_mode)


# A render in a fresh process that says which dataclasses it built and which patterns it compiled.
COUNTING = """import dataclasses, json, sys, re._compiler
built, compiled = [], []
build, compile_ = dataclasses._process_class, re._compiler.compile
dataclasses._process_class = lambda cls, *args: built.append(cls.__qualname__) or build(cls, *args)
re._compiler.compile = lambda pattern, flags=0: compiled.append(pattern) or compile_(pattern, flags)
from envkit.cli import main
code = main(sys.argv[1:])
print(json.dumps([sorted(built), [str(pattern) for pattern in compiled], "envkit.project.secrets" in sys.modules]))
sys.exit(code)
"""


def test_a_render_after_a_lock_changed_builds_no_dataclass_and_compiles_no_secret_pattern(project, tmp_path):
    """Issue 42: envkit's tables and the config's records are NamedTuples (a frozen dataclass cost about 0.7 ms at
    import, 26 of them 18 ms of such a render) and envkit.yaml's clean verdict is kept (its some 50 secret patterns
    cost about 5 ms to compile), so a render the memo misses builds no dataclass and compiles no secret pattern;
    nor imports envkit.project.secrets (its rules and imports, about 5 ms), which only a new value needs."""
    from envkit.project import detectors, secrets

    argv = ["render", "--target", "cuda", "--config", str(project / "envkit.yaml"), "--output", str(tmp_path / "out")]
    for _ in range(2):  # the first keeps envkit.yaml's clean verdict; the second misses the memo
        shutil.rmtree(tmp_path / "cache" / "render-memo", ignore_errors=True)
        done = subprocess.run(
            [sys.executable, "-c", COUNTING, *argv], capture_output=True, text=True, env=os.environ, cwd=REPO_ROOT
        )
        assert done.returncode == 0, done.stderr
    built, compiled, secrets_imported = json.loads(done.stdout.splitlines()[-1])
    assert built == [] and not secrets_imported
    rules = {text for _, patterns in detectors.DETECTORS for text, _ in patterns}
    rules |= {pattern.decode() for _, pattern in secrets.SECRET_CONTENT}
    rules |= {text for _, text in secrets._URL_CREDENTIALS}
    assert rules and not rules & set(compiled)


# A field's annotation typing compiles from text: a name imported for type checking alone (a module the record's own
# module must not import at run time).
TEXT_ANNOTATIONS = [["notebook_platforms.Runtime | None", "envkit.project.wheels"]]


def test_a_cold_renders_records_compile_no_annotation_from_text(project, tmp_path):
    """Issue 42: typing compiles a NamedTuple field's annotation that is text, as every one was in a module that
    imports annotations from __future__: some 200 fields, 2.3 ms of a cold render. The records' modules evaluate
    theirs, but for TEXT_ANNOTATIONS."""
    probe = (
        "import json, sys, typing\n"
        "text, new = [], typing.NamedTupleMeta.__new__\n"
        "def counted(cls, name, bases, namespace):\n"
        "    fields = namespace.get('__annotations__', {}).values()\n"
        "    text.extend([field, namespace['__module__']] for field in fields if isinstance(field, str))\n"
        "    return new(cls, name, bases, namespace)\n"
        "typing.NamedTupleMeta.__new__ = counted\n"
        "from envkit.cli import main\n"
        "code = main(sys.argv[1:])\n"
        "print(json.dumps([each for each in text if each[1].startswith('envkit.')]))\n"
        "sys.exit(code)\n"
    )
    argv = ["render", "--target", "cuda", "--config", str(project / "envkit.yaml"), "--output", str(tmp_path / "out")]
    env = {**os.environ, "ENVKIT_CACHE_DIR": str(tmp_path / "cold")}
    done = subprocess.run([sys.executable, "-c", probe, *argv], capture_output=True, text=True, env=env, cwd=REPO_ROOT)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == TEXT_ANNOTATIONS


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
    render_ = {"names": ["t"], "files": [["t/Dockerfile", "FROM x\n", 0o644]]}
    memo.remember(tmp_path / "envkit.yaml", "--all", render_, {str(read)})
    assert memo.recall(tmp_path / "envkit.yaml", "--all") == render_
    assert memo.recall(tmp_path / "envkit.yaml", "t") is None  # another selection
    read.write_text("b")
    assert memo.recall(tmp_path / "envkit.yaml", "--all") is None
    read.write_text("a")
    code = tmp_path / "code"
    code.mkdir()
    (code / "module.py").write_text("A = 1\n")
    monkeypatch.setattr(memo, "PACKAGE", code)
    memo.remember(tmp_path / "envkit.yaml", "--all", render_, {str(read)})
    assert memo.recall(tmp_path / "envkit.yaml", "--all") == render_
    (code / "module.py").write_text("A = 2\n")  # envkit's own code changed
    memo._code_digest.cache_clear()  # ... as the next envkit process sees it: a process hashes its code once
    assert memo.recall(tmp_path / "envkit.yaml", "--all") is None
    entry = next((tmp_path / "cache" / "render-memo").iterdir())
    entry.write_text("{not json")
    assert memo.recall(tmp_path / "envkit.yaml", "--all") is None
    # a render that walked a folder whole (outside git) is never remembered
    entry.unlink()
    memo.remember(tmp_path / "envkit.yaml", "--all", render_, {str(read), bounded_load.VOLATILE})
    assert memo.recall(tmp_path / "envkit.yaml", "--all") is None


def test_envkits_code_is_told_apart_by_its_files_times_and_read_only_where_just_changed(tmp_path, monkeypatch):
    """Issue 42: a remembered render read and hashed every file of envkit's package (about 6 ms of CPU); a file is
    now identified by its size, times and inode, and read only while its change time is within RACY_NS of now."""
    code = tmp_path / "code"
    code.mkdir()
    (code / "module.py").write_text("A = 1\n")
    just_changed = memo._code_digest.__wrapped__(code)

    def unread(path, *args, **kwargs):
        raise AssertionError(f"{path} was read")

    monkeypatch.setattr(memo, "RACY_NS", -(10**12))  # as if every file had been changed long ago
    monkeypatch.setattr(memo, "read_bytes", unread)
    settled = memo._code_digest.__wrapped__(code)
    assert settled != just_changed  # the bytes counted only while the file was fresh
    (code / "module.py").write_text("A = 22\n")
    assert memo._code_digest.__wrapped__(code) != settled


def _recorded(config: Path) -> dict[str, str | None]:
    """What the memo entry of `render --all` of ``config`` recorded: path -> digest."""
    [entry] = (Path(os.environ["ENVKIT_CACHE_DIR"]) / "render-memo").iterdir()
    return json.loads(entry.read_text())["read"]


def _opened_under(root: Path, action) -> set[str]:
    """Every file under ``root`` that ``action`` opens while it renders (a recording runs: not --check's reading
    of the output), seen by Python's audit hook rather than by envkit's reader."""
    opened: set[str] = set()
    _OPENED.append(opened)
    try:
        action()
    finally:
        _OPENED.remove(opened)
    return {path for path in opened if path.startswith(f"{root}/") and os.path.isfile(path)}


_OPENED: list[set[str]] = []


def _audit(event: str, args: tuple) -> None:
    if event == "open" and _OPENED and bounded_load._recorders and isinstance(args[0], (str, bytes, os.PathLike)):
        _OPENED[-1].add(os.path.abspath(os.fsdecode(args[0])))


sys.addaudithook(_audit)


def _mutate_each_and_assert_a_miss(config: Path, root: Path) -> int:
    """Change, one at a time, every path under ``root`` the render recorded (a file: one byte more; a file it
    looked for and did not find: created; a folder it listed: a file added), assert the memo misses, undo it,
    and assert it hits again. Returns how many paths were changed."""
    recorded = [path for path in _recorded(config) if path.startswith(f"{root}/")]
    assert memo.recall(config, "--all") is not None
    for path in map(Path, recorded):
        if path.is_dir():
            added = path / "added-by-the-test"
            added.write_text("x\n")
            undo = added.unlink
        elif path.is_file():
            before = path.read_bytes()
            path.write_bytes(before + b"\n")
            undo = functools.partial(path.write_bytes, before)
        else:
            if not path.parent.is_dir():
                continue  # a module looked for in a folder that is not there: the folder's listing is recorded
            path.write_text("x\n")
            undo = path.unlink
        assert memo.recall(config, "--all") is None, f"{path} changed and the memo still hit"
        undo()
        assert memo.recall(config, "--all") is not None, path
    return len(recorded)


def test_every_file_a_render_of_this_repository_reads_is_recorded_and_each_change_misses(project, capsys):
    from envkit.cli import main

    config = project / "envkit.yaml"
    opened = _opened_under(project, lambda: main(["render", "--all", "--check", "--config", str(config)]))
    capsys.readouterr()
    recorded = _recorded(config)
    assert opened and opened <= set(recorded), sorted(opened - set(recorded))
    assert str(project / "templates" / "Dockerfile.j2") in recorded and str(project / "recipes") in recorded
    assert _mutate_each_and_assert_a_miss(config, project) > 50


def test_every_file_a_render_of_the_example_project_reads_is_recorded_and_each_change_misses(
    tmp_path, capsys, monkeypatch
):
    """tests/example_project after `envkit init`: its requirements.txt among what a render reads (the memo
    once missed it: `render --all --check` said up to date after `echo pandas >> requirements.txt`)."""
    from envkit.cli import main

    monkeypatch.setenv("ENVKIT_CACHE_DIR", str(tmp_path / "cache"))
    project = tmp_path / "example"
    shutil.copytree(REPO_ROOT / "tests" / "example_project", project)
    subprocess.run(["git", "init", "-q"], cwd=project, check=True)
    subprocess.run(["git", "add", "-A"], cwd=project, check=True)
    config = project / "envkit.yaml"
    assert main(["init", "--dir", str(project)]) == 0
    assert main(["render", "--all", "--config", str(config)]) == 0
    capsys.readouterr()
    opened = _opened_under(project, lambda: main(["render", "--all", "--check", "--config", str(config)]))
    assert capsys.readouterr().out.count("up to date") >= 2
    memo_entries = list((Path(os.environ["ENVKIT_CACHE_DIR"]) / "render-memo").iterdir())
    for entry in memo_entries:  # the entry of this very render, not the one before it
        entry.unlink()
    opened = _opened_under(project, lambda: main(["render", "--all", "--check", "--config", str(config)]))
    capsys.readouterr()
    recorded = _recorded(config)
    assert opened <= set(recorded) and str(project / "requirements.txt") in recorded, sorted(opened - set(recorded))
    assert _mutate_each_and_assert_a_miss(config, project) >= 3
    with open(project / "requirements.txt", "a") as stream:
        stream.write("pandas\n")
    done = check(project, "envkit.yaml")
    assert done.returncode == 1 and "stale" in done.stderr, done


def check(cwd: Path, config: str) -> subprocess.CompletedProcess:
    """`envkit render --all --check --config CONFIG`, run in ``cwd``."""
    argv = [sys.executable, "-m", "envkit", "render", "--all", "--check", "--config", config]
    return subprocess.run(argv, capture_output=True, text=True, env=os.environ, cwd=cwd)


def test_a_changed_config_is_stale_from_every_working_directory_and_path(project, tmp_path):
    """The memo keyed an entry by the config's resolved path but recorded the config as typed: from another
    directory, a config there with the old content made a changed project 'up to date'."""
    twin = tmp_path / "twin"  # the same project elsewhere: its config is what the project's was
    shutil.copytree(project, twin, symlinks=True)
    (project / "sub").mkdir()
    (twin / "linked.yaml").symlink_to(project / "envkit.yaml")
    assert check(project, "envkit.yaml").returncode == 0  # remembered, the config named relative to the project
    text = (project / "envkit.yaml").read_text()
    (project / "envkit.yaml").write_text(
        text.replace("  cpu:\n    kind: cpu\n", "  cpu:\n    kind: cpu\n    env: {X: y}\n")
    )
    for cwd, config in (
        (twin, str(project / "envkit.yaml")),
        (twin, "linked.yaml"),
        (project / "sub", "../envkit.yaml"),
        (tmp_path, "project/envkit.yaml"),
        (project, "envkit.yaml"),
    ):
        done = check(cwd, config)
        assert done.returncode == 1 and "cpu: " in done.stdout and "stale (cpu)" in done.stderr, (cwd, config, done)
    # The twin, never changed, is up to date from anywhere, and a render of the project from the twin writes it.
    assert check(tmp_path, "twin/envkit.yaml").returncode == 0
    assert check(twin, "envkit.yaml").returncode == 0
    render_all = [sys.executable, "-m", "envkit", "render", "--all", "--config", str(project / "envkit.yaml")]
    done = subprocess.run(render_all, capture_output=True, text=True, env=os.environ, cwd=twin)
    # the Dockerfile's ENV and run.sh's -e: a target's env reaches the program wherever it runs (issue 40 §7)
    assert done.returncode == 0 and "(2 changed)" in done.stdout, done.stdout
    assert (
        "ENV X=" in (project / "docker" / "cpu" / "Dockerfile").read_text()
        or "X=y" in (project / "docker" / "cpu" / "Dockerfile").read_text()
    )
    assert check(twin, "linked.yaml").returncode == 0


def test_a_symlinked_lock_pointing_elsewhere_is_read_through_again(project, tmp_path):
    lock = project / "docker" / "tpu-vm" / "requirements.lock"
    kept = tmp_path / "kept.lock"
    kept.write_bytes(lock.read_bytes())
    lock.unlink()
    lock.symlink_to(kept)
    assert check(project, "envkit.yaml").returncode == 0
    other = tmp_path / "other.lock"
    other.write_bytes(kept.read_bytes().replace(b"\n", b"\n# hand edit\n", 1))
    lock.unlink()
    lock.symlink_to(other)
    done = check(project, "envkit.yaml")
    assert done.returncode != 0, done.stdout


@pytest.mark.parametrize("in_its_place", ["dangling symlink", "symlink loop", "directory"])
def test_an_absent_file_is_absent_only_while_nothing_stands_at_its_path(tmp_path, monkeypatch, in_its_place):
    """A render remembered without a lock is not a hit once something unreadable stands there: render refuses it."""
    monkeypatch.setenv("ENVKIT_CACHE_DIR", str(tmp_path / "cache"))
    lock = tmp_path / "requirements.lock"
    render_ = {"names": ["t"], "files": [["t/Dockerfile", "# UNLOCKED\n", 0o644]]}
    memo.remember(tmp_path / "envkit.yaml", "--all", render_, {str(lock)})
    assert memo.recall(tmp_path / "envkit.yaml", "--all") == render_
    if in_its_place == "directory":
        lock.mkdir()
    else:
        lock.symlink_to("gone.lock" if in_its_place == "dangling symlink" else lock.name)
    assert memo.recall(tmp_path / "envkit.yaml", "--all") is None


def remembered_command_project(tmp_path: Path, monkeypatch) -> Path:
    """A user's project with command experiments, gpu-train's notebook committed, rendered and remembered."""
    from command_project import command_project, git

    monkeypatch.setenv("ENVKIT_CACHE_DIR", str(tmp_path / "cache"))
    project = command_project(tmp_path / "mine")
    config = project / "envkit.yaml"
    config.write_text(config.read_text().replace("notebooks: [gpu-mnist]", "notebooks: [gpu-mnist, gpu-train]", 1))
    git(project, "commit", "-qam", "the notebook of gpu-train is committed")
    assert render(project, "--all")[0].returncode == 0
    assert render(project, "--all", "--check")[0].returncode == 0  # remembered
    return project


def test_a_command_experiments_notebook_is_stale_once_a_project_file_changes_or_is_tracked(tmp_path, monkeypatch):
    from command_project import git

    project = remembered_command_project(tmp_path, monkeypatch)
    (project / "helper.py").write_text("LOSS = 0.5\n")
    assert render(project, "--all", "--check")[0].returncode == 1
    assert render(project, "--all")[0].returncode == 0
    (project / "extra.py").write_text("X = 1\n")
    assert render(project, "--all", "--check")[0].returncode == 0  # untracked: not the notebook's
    git(project, "add", "extra.py")
    assert render(project, "--all", "--check")[0].returncode == 1


@pytest.mark.parametrize("change", ["chmod -x run.sh", "helper.py a link to an identical copy"])
def test_a_files_mode_and_linkness_are_read_like_its_bytes(tmp_path, monkeypatch, change):
    """Issue 39 §16: the memo called a stale render fresh after `chmod -x run.sh` (the notebook still listed it as
    executable) and after a tracked helper.py was replaced by a link to an identical copy (no longer carried)."""
    project = remembered_command_project(tmp_path, monkeypatch)
    if change == "chmod -x run.sh":
        (project / "run.sh").chmod(0o644)
    else:
        (tmp_path / "copy.py").write_bytes((project / "helper.py").read_bytes())
        (project / "helper.py").unlink()
        (project / "helper.py").symlink_to(tmp_path / "copy.py")
    done, imported = render(project, "--all", "--check")
    assert (done.returncode, "jinja2" in imported) == (1, True), done.stdout
    assert "notebooks/colab-t4/gpu-train.ipynb: stale" in done.stdout


def test_the_memo_is_its_users_alone_whatever_the_umask(project, tmp_path):
    old = os.umask(0o022)
    try:
        done, _ = render(project, "--all", "--check")
    finally:
        os.umask(old)
    assert done.returncode == 0, done.stderr
    folder = tmp_path / "cache" / "render-memo"
    entries = list(folder.iterdir())
    assert entries and folder.stat().st_mode & 0o777 == 0o700
    assert {entry.stat().st_mode & 0o777 for entry in entries} == {0o600}
