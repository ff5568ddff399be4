"""envkit.yaml read as a document: parsed with the line of every key and item, checked against the shipped JSON
Schema, and a locator that names 'file:line: field' for the error lines of every later pass (design.md section 1).
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from envkit.errors import EnvkitError
from envkit.project import kinds, validators
from envkit.project.datafile import DATA_DIR
from envkit.support.bounded_load import Refused, load_json, parse_yaml_kept, read_text

SCHEMA_PATH = DATA_DIR / "envkit.schema.json"

# A location inside the YAML document: keys and list indices from the top.
DocPath = tuple[Any, ...]


def read_document(path: Path) -> tuple[dict[str, Any], Locator]:
    """envkit.yaml's mapping, valid against the schema, and the locator of its lines."""
    data, lines = _parse_yaml(path)
    where = Locator(path, lines)
    # The validator generated from the effective schema, kinds included (scripts/generate_validators.py); jsonschema
    # is imported only to word what it rejects.
    line = None if validators.valid(SCHEMA_PATH.name, data) else _schema_error(data, where)
    if line is not None:
        # the line quotes what the schema rejects, and the secret check runs after this one
        raise EnvkitError(_concealed(line, data))
    return data, where


def _concealed(line: str, values) -> str:
    """secrets.concealed, imported for an error line alone: a valid envkit.yaml is read without the secret rules,
    whose verdict on its values is kept (envkit.project.secret_verdicts)."""
    from envkit.project import secrets

    return secrets.concealed(line, values)


class Locator:
    """Turns a path inside the document into 'file:line: a.b[0]' for error lines."""

    def __init__(self, path: Path, lines: dict[DocPath, int]):
        self.path = path
        self.lines = lines

    def __call__(self, doc_path: DocPath) -> str:
        line = next((self.lines[doc_path[:n]] for n in range(len(doc_path), -1, -1) if doc_path[:n] in self.lines), 1)
        return f"{self.path}:{line}: {_dotted(doc_path)}" if doc_path else f"{self.path}:{line}"


def _dotted(doc_path: DocPath) -> str:
    text = ""
    for part in doc_path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _parse_yaml(path: Path) -> tuple[Any, dict[DocPath, int]]:
    try:
        text = read_text(path)
    except FileNotFoundError:
        raise EnvkitError(f"config file {path} not found; create it or pass --config FILE") from None
    except OSError as exc:
        raise EnvkitError(f"cannot read config file {path}: {exc.strerror or exc}") from None
    except Refused as exc:  # a directory, a FIFO, a device, too large, not UTF-8 text
        raise EnvkitError(f"{exc.at(path)}; pass --config FILE with a YAML file") from None
    try:
        data, lines = parse_yaml_kept(text, "envkit.yaml's lines", lambda node: _lines(node, path))
    except Refused as exc:
        raise EnvkitError(exc.at(path)) from None
    if not isinstance(data, dict):
        found = "an empty file" if data is None else f"a {type(data).__name__}"
        raise EnvkitError(f"{path}:1: expected a mapping with a 'targets' key, found {found}")
    return data, lines


def _lines(node: Any, path: Path) -> dict[DocPath, int]:
    """The line of every key and item, so that schema errors point at the line to fix."""
    lines: dict[DocPath, int] = {}
    _index_lines(node, (), lines, path)
    return lines


def _index_lines(node: Any, doc_path: DocPath, lines: dict[DocPath, int], path: Path) -> None:
    import yaml  # imported by the parse that composed ``node``: a kept document imports no PyYAML

    if isinstance(node, yaml.MappingNode):
        seen: set[Any] = set()
        for key_node, value_node in node.value:
            key = key_node.value
            if key in seen:
                line = f"{path}:{key_node.start_mark.line + 1}: {_dotted(doc_path + (key,))}: duplicate key"
                raise EnvkitError(_concealed(line, list(doc_path + (key,))))
            seen.add(key)
            lines[doc_path + (key,)] = key_node.start_mark.line + 1
            _index_lines(value_node, doc_path + (key,), lines, path)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            lines[doc_path + (index,)] = item.start_mark.line + 1
            _index_lines(item, doc_path + (index,), lines, path)


@lru_cache(maxsize=1)
def schema() -> dict[str, Any]:
    """The shipped schema with the kinds of envkit/data/kinds.yaml as the kind's choices."""
    loaded = load_json(SCHEMA_PATH)
    names = kinds.names()
    loaded["$defs"]["target"]["properties"]["kind"] = {"description": f"one of {', '.join(names)}", "enum": names}
    # here, not above: the schema is built only to word a rejection (or by the generator); a config without
    # notebook targets then never builds the platforms' records (issue 42: their dataclasses at import)
    from envkit.project import notebook_platforms

    platforms = notebook_platforms.names()
    loaded["$defs"]["target"]["properties"]["platform"]["enum"] = platforms
    loaded["$defs"]["target"]["properties"]["platform"]["description"] += f": one of {', '.join(platforms)}"
    return loaded


def _schema_error(data: Any, where: Locator) -> str | None:
    """The error line of ``data``, which the generated validator rejects; None where jsonschema finds no error."""
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import best_match

    errors = list(Draft202012Validator(schema()).iter_errors(data))
    if not errors:
        return None
    # A misspelt key also leaves a required one missing: name the typo, it is the cause.
    unknown_keys = [error for error in errors if error.validator == "additionalProperties"]
    error = best_match(unknown_keys or errors)
    doc_path = tuple(error.absolute_path)
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        import difflib  # a typo's suggestion: only for a config that fails

        allowed = sorted(error.schema.get("properties", {}))
        unknown = sorted(set(error.instance) - set(allowed))[0]
        close = difflib.get_close_matches(str(unknown), allowed, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        return f"{where(doc_path + (unknown,))}: unknown key {unknown!r}; {hint}allowed: {', '.join(allowed)}"
    if error.validator == "required":
        return f"{where(doc_path)}: {error.message}"
    description = error.schema.get("description") or _parent_description(doc_path)
    value = json.dumps(error.instance) if not isinstance(error.instance, str) else repr(error.instance)
    value = _concealed(value, data)  # before it is cut, which would leave part of a secret unrecognised
    if len(value) > 60:
        value = value[:57] + "..."
    allowed = f"; allowed: {description}" if description else f" ({error.message})"
    if error.validator == "type" and isinstance(error.instance, (int, float)) and not isinstance(error.instance, bool):
        # YAML reads 3.10 as the number 3.1: versions must be quoted.
        allowed += '; quote versions in YAML ("3.10", not 3.10)'
    return f"{where(doc_path)}: {value} is not valid{allowed}"


def _parent_description(doc_path: DocPath) -> str | None:
    # Errors inside a $ref'd definition carry that definition's schema, whose
    # description lives on the referring property.
    if len(doc_path) >= 3 and doc_path[0] == "targets":
        prop = schema()["$defs"]["target"]["properties"].get(doc_path[2], {})
        return prop.get("description")
    return None
