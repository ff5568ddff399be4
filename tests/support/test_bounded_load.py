"""Every YAML and JSON file envkit reads is capped in size, depth and aliases (envkit/support/bounded_load.py).

The three attacks run as a user meets them: the envkit command in a subprocess whose address
space (RLIMIT_AS) and CPU time (RLIMIT_CPU, 1 s: the kernel stops it, this test times nothing)
are limited. Each must end in one line and exit 2, long before either limit; before the caps, the
alias bomb ended in a MemoryError traceback and the deep nesting in a segfault of libyaml's composer.
"""

from __future__ import annotations

import json
import os
import re
import resource
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from paths import REPO_ROOT
from project_copy import copy_project

from envkit.project import datafile
from envkit.support import bounded_load
from envkit.support.bounded_load import MAX_ALIASES, MAX_DEPTH, Refused, parse_json, parse_yaml

MEMORY_LIMIT = 512 * 2**20  # envkit's own commands need under 150 MiB of address space here
CPU_LIMIT_S = 1
CONFIG = 'targets:\n  cpu: {kind: cpu, torch: "2.9.0"}\n'


def alias_bomb(levels: int = 9) -> str:
    """Nine anchors, each a list of nine aliases of the one before: 9**9 values from about 400 bytes."""
    names = [f"l{level}" for level in range(levels)]
    lines = [f"{names[0]}: &{names[0]} [x, x, x, x, x, x, x, x, x]"]
    lines += [f"{name}: &{name} [{', '.join(['*' + previous] * 9)}]" for previous, name in zip(names, names[1:])]
    return CONFIG + "\n".join(lines) + "\n"


def _limits(cpu_s: int = CPU_LIMIT_S) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))


def limited_envkit(cwd: Path, *argv: str, cpu_s: int = CPU_LIMIT_S) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "ENVKIT_CACHE_DIR": str(cwd / "cache")}
    return subprocess.run(
        [sys.executable, "-m", "envkit", *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        preexec_fn=lambda: _limits(cpu_s),
        env=env,
        timeout=120,
    )


def assert_one_line(done: subprocess.CompletedProcess, fragment: str) -> None:
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert fragment in done.stderr, done.stderr


def test_a_yaml_alias_bomb_in_the_config_is_one_line(tmp_path):
    (tmp_path / "envkit.yaml").write_text(alias_bomb())
    for command in (["targets"], ["render", "--all", "--check"]):
        done = limited_envkit(tmp_path, *command)
        assert_one_line(done, "envkit.yaml:8: more than 100000 values once aliases are expanded")


def test_deep_nesting_is_one_line(tmp_path):
    (tmp_path / "envkit.yaml").write_text(CONFIG + "deep: " + "[" * 100_000 + "]" * 100_000 + "\n")
    assert_one_line(limited_envkit(tmp_path, "targets"), f"envkit.yaml:3: nested deeper than {MAX_DEPTH} levels")
    results = tmp_path / "deep.json"
    results.write_text("[" * 100_000 + "]" * 100_000)
    assert_one_line(
        limited_envkit(tmp_path, "diff", "deep.json", "deep.json"), f"nested deeper than {MAX_DEPTH} levels"
    )


def test_a_100_mb_file_is_refused_unread(tmp_path):
    big = tmp_path / "envkit.yaml"
    with big.open("w") as stream:  # a valid config, then 100 MB of comment that a parser would have to read
        stream.write(CONFIG)
        for _ in range(100):
            stream.write("#" * 2**20)
    assert big.stat().st_size > 100 * 10**6
    assert_one_line(limited_envkit(tmp_path, "targets"), "envkit.yaml: larger than 16 MiB")
    results = tmp_path / "results"
    results.mkdir()
    (results / "big.json").symlink_to(big)
    done = limited_envkit(tmp_path, "report", "results")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.splitlines() == [
        f"envkit: error: no results in results: its one *.json file is not a results file ({Path('results') / 'big.json'}: "
        "larger than 16 MiB, more than any file envkit reads; is it the right file?); "
        "run a recipe, `envkit compare` or `envkit demo` first",
    ]


def test_what_a_render_only_hashes_is_capped_too(tmp_path):
    """Issue 28 §8, §9: the render memo hashed every file it had read whole (a 2 GB sparse envkit.yaml cost
    2.1 GB before it was refused), and render read committed notebooks whole (/dev/zero: MemoryError)."""
    project = copy_project(tmp_path / "project")
    assert limited_envkit(project, "render", "--all", cpu_s=60).returncode == 0  # the memo now has an entry
    notebook = project / "notebooks" / "colab-t4" / "gpu-mnist.ipynb"
    notebook.unlink()
    notebook.symlink_to("/dev/zero")
    done = limited_envkit(project, "render", "--all", "--check", cpu_s=60)
    assert done.returncode == 1 and done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert f"{notebook}: unreadable (a character device, not a regular file)" in done.stdout
    notebook.unlink()
    config = project / "envkit.yaml"
    config.unlink()
    with config.open("wb") as stream:
        stream.truncate(2 * 2**30)
    assert_one_line(limited_envkit(project, "render", "--all", cpu_s=60), "envkit.yaml: larger than 16 MiB")


def test_a_stream_without_end_is_read_only_up_to_the_cap(tmp_path):
    assert_one_line(
        limited_envkit(tmp_path, "targets", "--config", "/dev/zero"),
        "/dev/zero: a character device, not a regular file",
    )


def test_envkits_own_files_read_as_before():
    """The bounded loader builds exactly what PyYAML's safe loader builds, for every YAML file envkit ships."""
    shipped = sorted((REPO_ROOT / "envkit" / "data").glob("*.yaml")) + [
        REPO_ROOT / "envkit.yaml",
        REPO_ROOT / "tests" / "golden" / "envkit.yaml",
    ]
    assert len(shipped) > 2, "envkit/data ships no YAML file"
    for path in shipped:
        text = path.read_text()
        assert parse_yaml(text) == yaml.safe_load(text), path


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a: &a [*a]\n", "alias *a is inside the node it names"),
        ("a: &a {b: *a}\n", "alias *a is inside the node it names"),
        ("a: 1\nb: [" + ", ".join(["*x"] * (MAX_ALIASES + 1)) + "]\n", "found undefined alias 'x'"),
        ("x: &x 1\nb: [" + ", ".join(["*x"] * (MAX_ALIASES + 1)) + "]\n", f"more than {MAX_ALIASES} aliases"),
        ("a: " + "[" * MAX_DEPTH + "]" * MAX_DEPTH, f"nested deeper than {MAX_DEPTH} levels"),
        # Depth reached through aliases counts as well: each anchor nests the one before.
        (
            "".join(f"l{i}: &l{i} [{'*l' + str(i - 1) if i else 'x'}]\n" for i in range(MAX_DEPTH + 1)),
            f"nested deeper than {MAX_DEPTH} levels",
        ),
        ("a: &a 1\nb: &a 2\n", "found duplicate anchor 'a'"),
        ("a: 2024-13-45\n", "month must be in 1..12"),
        ("a: " + "1" * 5000 + "\n", "an integer of more than 4300 digits"),
        ("a: !!python/object/apply:os.system [id]\n", "could not determine a constructor"),
        ("a: [\n", "malformed YAML"),
    ],
)
def test_hostile_yaml_is_one_refusal(text, message):
    with pytest.raises(Refused) as refused:
        parse_yaml(text)
    assert message in refused.value.at("f.yaml") and "\n" not in refused.value.at("f.yaml")


def test_nesting_up_to_the_cap_reads():
    assert parse_yaml("a: " + "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1))["a"] is not None  # the mapping is a level
    anchors = "x: &x 1\nb: [" + ", ".join(["*x"] * MAX_ALIASES) + "]\n"
    assert parse_yaml(anchors)["b"] == [1] * MAX_ALIASES
    assert parse_json("[" * MAX_DEPTH + "]" * MAX_DEPTH) is not None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), f"nested deeper than {MAX_DEPTH} levels"),
        ("[" * 100_000 + "]" * 100_000, f"nested deeper than {MAX_DEPTH} levels"),
        ("1" * 5000, "an integer of more than 4300 digits"),
        ('{"a": ', "partial or malformed"),
        (b"\xff\xfe{}", "partial or malformed"),
    ],
)
def test_hostile_json_is_one_refusal(text, message):
    with pytest.raises(Refused, match=re.escape(message)):
        parse_json(text)


def test_envkits_own_tables_are_not_walked_for_depth_and_still_refuse_what_json_does(monkeypatch):
    """The tables envkit ships (tables.json, regenerated by its tests) skip the depth walk that guards against a
    user's documents (issue 42); a malformed or too deeply nested one is still one refusal, from json itself."""
    deeper = "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1)
    assert parse_json(deeper, walk=False) is not None
    for text in ('{"a": ', "[" * 100_000 + "]" * 100_000):
        with pytest.raises(Refused):
            parse_json(text, walk=False)
    walked = []
    monkeypatch.setattr(bounded_load, "_check_depth", walked.append)
    datafile._shipped_tables.cache_clear()
    try:
        assert set(datafile._shipped_tables()) == set(datafile.TABLE_NAMES)
    finally:
        datafile._shipped_tables.cache_clear()
    assert walked == []


def test_non_utf8_text_is_one_refusal(tmp_path):
    path = tmp_path / "x.yaml"
    path.write_bytes(b"a: \xff\n")
    with pytest.raises(Refused, match=r"not UTF-8 text \(byte 3\)"):
        bounded_load.read_text(path)


def test_every_yaml_and_json_reader_goes_through_the_bounded_loader():
    """No other module parses YAML or JSON itself (the package index's JSON is a network reply, not a file)."""
    parser = re.compile(r"\b(yaml\.(safe_)?load|yaml\.(C?Safe)?Loader\(|json\.loads?\()")
    # (the notebook helper runs in a notebook's own kernel and imports no envkit: its venv's package list is what it
    # parses, and it reads results through the run wrapper's reader; the wrapper runs in images and notebooks alone)
    allowed = {
        "envkit/support/bounded_load.py",
        "envkit/lock/index_check.py",
        "envkit/notebook/runtime_venv.py",
        "envkit/support/provenance.py",
        "envkit/support/provenance_records.py",
        "envkit/support/provenance_facts.py",
        "envkit/support/provenance_device.py",
        "envkit/support/provenance_output.py",
    }
    offenders = []
    for path in sorted((REPO_ROOT / "envkit").rglob("*.py")):
        name = path.relative_to(REPO_ROOT).as_posix()
        if name not in allowed:
            offenders += [
                f"{name}:{number}"
                for number, line in enumerate(path.read_text().splitlines(), 1)
                if parser.search(line)
            ]
    assert offenders == []


def test_a_text_read_again_in_one_process_is_a_copy_neither_parsed_nor_kept_again(tmp_path, monkeypatch):
    """Issue 42: the experiments table's read of envkit.yaml (no index) after envkit.yaml's own (with its lines) in
    one process takes a copy of the document: no second parse, no second entry; the copies are independent."""
    monkeypatch.setenv("ENVKIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(bounded_load, "_read_here", {})
    texts = [f"targets: {{cpu: {{kind: cpu}}}}\nn: {number}\n" for number in range(bounded_load.READ_HERE + 1)]
    first, lines = bounded_load.parse_yaml_kept(texts[0], "lines", lambda node: node.start_mark.line)
    parsed = []
    monkeypatch.setattr(bounded_load, "parse_yaml", lambda *_: parsed.append(1))
    copy, none = bounded_load.parse_yaml_kept(texts[0], "data")
    assert (copy, none, parsed) == (first, None, [])
    copy["targets"]["cpu"]["kind"] = "cuda"
    assert bounded_load.parse_yaml_kept(texts[0], "data")[0] == first  # another copy
    assert len(list((tmp_path / "cache" / "yaml").iterdir())) == 1
    monkeypatch.undo()
    monkeypatch.setenv("ENVKIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(bounded_load, "_read_here", {})
    for text in texts:
        bounded_load.parse_yaml_kept(text, "lines", lambda node: None)
    assert list(bounded_load._read_here) == texts[1:]  # a few, the least recently read going first


def test_a_kept_document_is_the_parsed_one_and_imports_no_yaml(tmp_path, monkeypatch):
    """Issue 42: envkit.yaml read again unchanged comes from envkit's cache, as parsed, without PyYAML; a date
    (which marshal does not write) and a damaged entry are parsed again."""
    monkeypatch.setenv("ENVKIT_CACHE_DIR", str(tmp_path / "cache"))
    text = "a: [1, 2.5, true, null, {b: c}]\n1: x\ns: !!set {m: null}\nt: &t [x]\nu: *t\n"

    def index(node):
        return {"first key line": node.value[0][0].start_mark.line}

    parsed = bounded_load.parse_yaml_kept(text, "test", index)
    assert parsed == (parse_yaml(text), {"first key line": 0})
    assert bounded_load.parse_yaml_kept(text, "test", index) == parsed
    monkeypatch.setattr(bounded_load, "_read_here", {})  # as another process: the text not read here yet
    plain = bounded_load.parse_yaml_kept(text, "plain")
    assert plain == (parse_yaml(text), None)
    probe = (
        "import json, sys; from envkit.support import bounded_load;"
        f"kept = bounded_load.parse_yaml_kept({text!r}, 'plain');"
        "print(json.dumps([repr(kept), 'yaml' in sys.modules]))"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=True)
    assert done.stdout.strip() == json.dumps([repr(plain), False])
    dated = "when: 2026-11-29\n"
    assert bounded_load.parse_yaml_kept(dated, "test")[0] == parse_yaml(dated)
    entries = sorted((tmp_path / "cache" / "yaml").iterdir())
    assert len(entries) == 2  # the dated document is not kept
    for entry in entries:
        entry.write_bytes(b"\x00damaged")
    assert bounded_load.parse_yaml_kept(text, "test", index) == parsed
