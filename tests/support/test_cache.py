"""envkit's cache: compiled templates save time and never change an answer."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from envkit.errors import EnvkitError
from envkit.project.load import load_config
from envkit.render import memo
from envkit.render import target_files as render
from envkit.support import bounded_load
from envkit.support.atomic import write_bytes_atomic
from envkit.support.cache import keep, nothing_kept, used


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    directory = tmp_path / "cache"
    monkeypatch.setenv("ENVKIT_CACHE_DIR", str(directory))
    return directory


def test_render_on_a_cold_or_warm_cache_skips_jsonschema_and_gives_the_same_bytes(tmp_path, repo_root):
    shutil.copy(repo_root / "envkit.yaml", tmp_path / "envkit.yaml")
    for folder in ("templates", "notebooks", "recipes"):  # the notebook targets render from their locks and the recipes
        shutil.copytree(repo_root / folder, tmp_path / folder, ignore=shutil.ignore_patterns("__pycache__"))
    with open(tmp_path / "templates" / "dockerignore.j2", "a") as own:  # the project's own .dockerignore template
        own.write("# the project's own\n")
    probe = (
        # An image target: a notebook target's render imports nbformat, which imports jsonschema.
        "import sys, json; from envkit.cli import main; code = main(['render', '--target', 'cpu', '--stdout']);"
        "print(json.dumps([code, 'jsonschema' in sys.modules]), file=sys.stderr)"
    )
    env_cache = {"ENVKIT_CACHE_DIR": str(tmp_path / "cache")}
    runs = [
        subprocess.run(
            [sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, env={**os.environ, **env_cache}
        )
        for _ in range(2)
    ]
    assert [json.loads(run.stderr.splitlines()[-1]) for run in runs] == [[0, False], [0, False]]
    assert runs[0].stdout == runs[1].stdout and "FROM " in runs[0].stdout
    assert "# the project's own" in runs[0].stdout
    # The project's own template compiled once and kept; envkit's own, read from their generated modules, are not
    # copied into the cache.
    assert len(list((tmp_path / "cache" / "templates").glob("*/__jinja2_*.cache"))) == 1


def test_compiled_templates_render_what_fresh_ones_do(cache, repo_root, tmp_path, monkeypatch):
    config = load_config(repo_root / "envkit.yaml")
    cold = render.render_targets(config, list(config.images))
    warm = render.render_targets(config, list(config.images))  # now from the bytecode cache
    monkeypatch.setenv("ENVKIT_CACHE_DIR", str(tmp_path / "file-in-the-way" / "x"))
    (tmp_path / "file-in-the-way").write_text("")
    uncached = render.render_targets(config, list(config.images))
    assert cold == warm == uncached


def test_an_invalid_config_fails_the_same_after_a_valid_one_was_cached(cache, tmp_path, repo_root):
    config = tmp_path / "envkit.yaml"
    shutil.copy(repo_root / "envkit.yaml", config)
    load_config(config)
    text = config.read_text()
    config.write_text(text.replace("  cpu:\n    kind: cpu", "  cpu:\n    kind: cpuu", 1))
    line = text[: text.index("  cpu:\n    kind: cpu")].count("\n") + 2
    with pytest.raises(EnvkitError, match=rf"envkit.yaml:{line}: targets.cpu.kind: 'cpuu' is not valid"):
        load_config(config)


@pytest.mark.parametrize(
    "argv",
    [
        ["experiment", "cpu-mnist", "--dry-run"],
        ["compare", "--dry-run"],
        ["demo", "--dry-run"],
        ["launch", "cpu-ddp-cifar", "--on", "slurm", "--dry-run"],
    ],
    ids=" ".join,
)
def test_a_dry_run_keeps_nothing_in_the_cache(cache, repo_root, monkeypatch, capsys, argv):
    """Issue 28 §23: the dry runs of experiment, compare, demo wrote schema-check markers into the cache."""
    from envkit.cli import main

    monkeypatch.chdir(repo_root)
    assert main(argv) == 0, capsys.readouterr().err
    assert not cache.exists() or not any(cache.rglob("*")), sorted(cache.rglob("*"))
    assert main(["render", "--all", "--stdout"]) == 0  # a run that is not dry keeps its compiled templates
    assert any(cache.rglob("*"))


def test_a_bounded_folder_keeps_its_most_recently_used_entries(cache):
    folder = cache / "kept"
    for number in range(5):
        keep(folder / f"{number}.json", b"{}", at_most=5)
        os.utime(folder / f"{number}.json", ns=(10**18 + number * 10**12,) * 2)  # 0 the oldest, 4 the newest
    (folder / ".5.json.123-abc.partial").write_bytes(b"")  # another process staging an entry: not one yet
    used(folder / "0.json")  # read again: now the most recently used
    keep(folder / "5.json", b"{}", at_most=5)
    keep(folder / "6.json", b"{}", at_most=5)
    assert sorted(path.name for path in folder.iterdir()) == [
        ".5.json.123-abc.partial",
        "0.json",
        "3.json",
        "4.json",
        "5.json",
        "6.json",
    ]


def test_an_entry_is_not_fsynced_and_what_a_crash_may_leave_of_one_is_a_miss(cache, tmp_path, monkeypatch):
    """The cache only saves time (issue 42): its entries are replaced whole but not fsync'ed, unlike what envkit
    writes for its user; a crash may then leave an entry empty or short, which its reader takes for a missing one
    (and keeps whole again)."""
    synced = []
    fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda descriptor: synced.append(descriptor) or fsync(descriptor))
    keep(cache / "kept" / "a.json", b"{}")
    assert synced == []
    write_bytes_atomic(tmp_path / "rendered", b"FROM x\n")
    assert len(synced) == 1
    text = "a: [1, 2.5, {b: c}]\n"
    parsed = bounded_load.parse_yaml_kept(text, "test")
    config, read = tmp_path / "envkit.yaml", tmp_path / "input"
    read.write_text("a")
    memo.remember(config, "--all", {"files": 1}, {str(read)})
    for folder, again in (("yaml", lambda: bounded_load.parse_yaml_kept(text, "test")), ("render-memo", None)):
        entry = next((cache / folder).iterdir())
        whole = entry.read_bytes()
        for torn in (b"", whole[: len(whole) // 2]):
            entry.write_bytes(torn)
            if again is None:
                assert memo.recall(config, "--all") is None
            else:
                monkeypatch.setattr(bounded_load, "_read_here", {})  # as the next process: read from the cache
                assert again() == parsed
                assert entry.read_bytes() == whole  # parsed again and kept whole


def test_a_dry_run_neither_keeps_nor_marks_an_entry_used(cache):
    keep(cache / "kept" / "a.json", b"{}", at_most=1)
    os.utime(cache / "kept" / "a.json", ns=(10**18,) * 2)
    with nothing_kept():
        used(cache / "kept" / "a.json")
        keep(cache / "kept" / "b.json", b"{}", at_most=1)
    assert [path.name for path in (cache / "kept").iterdir()] == ["a.json"]
    assert (cache / "kept" / "a.json").stat().st_mtime_ns == 10**18


def test_renders_and_parsed_configs_are_kept_in_bounded_folders(cache, tmp_path, monkeypatch):
    monkeypatch.setattr(memo, "MEMO_ENTRIES", 2)
    monkeypatch.setattr(bounded_load, "PARSED_ENTRIES", 2)
    for number in range(4):
        (tmp_path / f"p{number}").mkdir()
        config = tmp_path / f"p{number}" / "envkit.yaml"
        config.write_text(f"# project {number}\ntargets:\n  cpu: {{kind: cpu}}\n")
        memo.remember(config, "--all", {"files": number}, {str(config)})
        bounded_load.parse_yaml_kept(config.read_text(), "config")
    assert len(list((cache / "render-memo").iterdir())) == 2
    assert len(list((cache / "yaml").iterdir())) == 2
    assert memo.recall(tmp_path / "p3" / "envkit.yaml", "--all") == {"files": 3}
    assert memo.recall(tmp_path / "p0" / "envkit.yaml", "--all") is None  # the oldest went
