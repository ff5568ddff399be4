"""The validators generated from envkit's schemas (envkit/project/validators.py): they are those of the schemas
today, and they accept exactly what jsonschema accepts, anchors included."""

from __future__ import annotations

import importlib.util
import json
import re

import pytest
import yaml
from jsonschema import Draft202012Validator
from paths import REPO_ROOT

from envkit.errors import EnvkitError
from envkit.project import validators
from envkit.project.datafile import DATA_DIR, TABLE_NAMES, TABLES, load_table
from envkit.project.document import schema
from envkit.project.load import load_config

GENERATOR = REPO_ROOT / "scripts" / "generate_validators.py"
GENERATED_SCHEMAS = ("envkit.schema.json", "experiments.schema.json", "pushed.schema.json")


def generator():
    spec = importlib.util.spec_from_file_location("generate_validators", GENERATOR)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_committed_module_is_what_the_schemas_generate_today():
    """Fails after a schema, kinds.yaml or notebook_platforms.yaml changed: run scripts/generate_validators.py."""
    assert validators.__file__ == str(generator().MODULE)
    assert generator().generate() == generator().MODULE.read_text(encoding="utf-8")


def test_the_shipped_detector_patterns_are_those_of_the_installed_detect_secrets_today():
    """Fails after secrets.py's detectors or detect-secrets' pin changed: run scripts/generate_validators.py."""
    assert generator().detectors() == generator().DETECTORS.read_text(encoding="utf-8")


@pytest.mark.parametrize(
    "pattern, flags, needs",
    [
        (r"sk-ant-(?:api|admin)\d\d-x", 0, (14, "sk-ant-a")),  # re takes the branches' common "a" out of them
        (r"ab?cd", 0, (3, "cd")),  # what may be absent ends a run
        (r"(?:\s|^)AKC[a-z]{3}", 0, (6, "AKC")),
        (r"(ghp|gho)_x", 0, (5, "_x")),  # a group is no plain character
        (r"a|bcd", 0, (1, None)),  # no character is in every match
        (r"(?i:ab)cd", 0, (4, "cd")),
        (r"xox-\d+", re.IGNORECASE, (5, "-")),  # under IGNORECASE a letter matches its other case
        (r"(?i)token=[^&]", 0, (7, "=")),
        ("\u00dfx://", re.IGNORECASE, (5, "://")),  # ß matches ẞ: no letter, ASCII or not
    ],
)
def test_what_a_patterns_matches_need_is_its_shortest_length_and_a_run_every_match_holds(pattern, flags, needs):
    """envkit.project.secrets searches a text with a pattern only where the text has it (issue 42)."""
    assert generator().needed(pattern, flags) == needs


@pytest.mark.parametrize("name", TABLE_NAMES)
def test_the_tables_shipped_ready_to_load_are_their_yaml_today(name):
    """Fails after kinds.yaml, matrix.yaml or notebook_platforms.yaml changed: run scripts/generate_validators.py.
    (A table that differs from its parsed copy is parsed from its YAML: never wrong, only slower.)"""
    assert generator().tables() == TABLES.read_text(encoding="utf-8")
    text = (DATA_DIR / name).read_text(encoding="utf-8")
    assert json.dumps(load_table(DATA_DIR / name)) == json.dumps(yaml.safe_load(text))  # the keys' order too


def test_an_edited_copy_of_a_table_is_parsed_from_its_yaml(tmp_path):
    copy = tmp_path / "kinds.yaml"
    copy.write_text((DATA_DIR / "kinds.yaml").read_text().replace("user: root", "user: caller"))
    assert load_table(copy) == yaml.safe_load(copy.read_text()) != load_table(DATA_DIR / "kinds.yaml")


def test_the_generated_module_needs_the_standard_library_alone():
    imported = re.findall(r"^(?:from|import) (\w+)", generator().MODULE.read_text(encoding="utf-8"), re.MULTILINE)
    assert set(imported) <= {"re", "decimal"}


def test_every_anchor_matches_the_end_of_the_value_only():
    """Python's $ also matches before a trailing newline, which the generated validators' \\Z does not."""
    assert GENERATED_SCHEMAS
    for name in GENERATED_SCHEMAS:
        patterns = re.findall(r'"pattern": "((?:[^"\\]|\\.)*)"', (DATA_DIR / name).read_text())
        assert patterns, name
        for pattern in patterns:
            assert re.findall(r"(?<!\\)\$(?!\(\?!\\\\n\))", pattern) == [], f"{name}: {pattern}"


def config(target: dict) -> dict:
    return {"targets": {"cpu": {"kind": "cpu", "torch": "2.9.0", **target}}}


# A target's settings -> whether they pass: a trailing newline never does (torch: "2.9.0\n" passed jsonschema before).
VALUES = [
    ({"torch": "2.9.0\n"}, False),
    ({"torch": "2.9.0"}, True),
    ({"python": "3.11\n"}, False),
    ({"env": {"A": "x\n"}}, False),
    ({"env": {"A\n": "x"}}, False),
    ({"env": {"A": "$HOME"}}, False),  # a $ inside a character class: fastjsonschema needs it escaped
    ({"env": {"A": "x"}}, True),
    ({"pip_packages": ["numpy==2.0\n"]}, False),
    ({"apt_packages": ["curl\n"]}, False),
    ({"base_image": "python:3.11-slim\n"}, False),
    ({"find_links": ["/wheels\n"]}, False),
    ({"shm_size": "2g\n"}, False),
    ({"apt_snapshot": "20251120T000000Z\n"}, False),
    ({"cuda": "12.8\n"}, False),
    ({"kind": "rocm"}, False),
    ({"platform": "colab\n"}, False),
]


@pytest.mark.parametrize("target, passes", VALUES, ids=lambda value: json.dumps(value))
def test_the_generated_validator_agrees_with_jsonschema(target, passes):
    document = config(target)
    assert not list(Draft202012Validator(schema()).iter_errors(document)) == passes
    assert validators.valid("envkit.schema.json", document) == passes


@pytest.mark.parametrize(
    "output",
    ["images: docker/x\n", "images: ../x", "images: 'a/..\\n'", "notebooks: a/./b"],
)
def test_output_folders_agree(output):
    document = {**config({}), "output": dict([output.split(": ", 1)])}
    expected = not list(Draft202012Validator(schema()).iter_errors(document))
    assert validators.valid("envkit.schema.json", document) == expected


def test_a_version_with_a_trailing_newline_is_one_line(tmp_path):
    path = tmp_path / "envkit.yaml"
    path.write_text('targets:\n  cpu:\n    kind: cpu\n    torch: "2.9.0\\n"\n')
    with pytest.raises(EnvkitError) as raised:
        load_config(path)
    assert str(raised.value) == f"{path}:4: targets.cpu.torch: '2.9.0\\n' is not valid; allowed: a release number X.Y.Z"
