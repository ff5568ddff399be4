"""docs/cli.md is envkit's parser written out: every command, option, choice and help line, so it cannot drift.

Written from the parser's actions, not from argparse's --help text, whose wording and wrapping change between
Python releases. `pytest --update-golden tests/cli/test_cli_reference.py` rewrites it after a change to the CLI.
"""

from __future__ import annotations

import argparse
import re

import pytest
from paths import REPO_ROOT

from envkit.cli import build_parser
from envkit.launch import engines

CLI_MD = REPO_ROOT / "docs" / "cli.md"
HEADER = """# envkit's command line

Generated from envkit's parser (`pytest --update-golden tests/cli/test_cli_reference.py` rewrites it;
the test fails when it and the parser differ). `envkit COMMAND --help` prints the same. Every command that
reads the config takes `--config FILE` (default `./envkit.yaml`); bad input is one line on stderr and exit 2.
"""


def cell(text: str) -> str:
    """One table cell of prose: one line, its pipes escaped, and <placeholders> shown rather than taken for HTML."""
    return " ".join(text.split()).replace("|", "\\|").replace("<", "\\<")


def code(text: str) -> str:
    """One table cell of code, in backquotes (where Markdown shows < as it is)."""
    return "`" + " ".join(text.split()).replace("|", "\\|") + "`"


def argument(action: argparse.Action) -> str:
    """How the argument is written: its flags or name, then the value it takes."""
    if not action.option_strings:
        return action.metavar or action.dest
    if action.nargs == 0:
        return ", ".join(action.option_strings)
    value = action.metavar or (
        "{" + ",".join(map(str, action.choices)) + "}" if action.choices else action.dest.upper()
    )
    return ", ".join(f"{flag} {value}" for flag in action.option_strings)


def table(actions) -> list[str]:
    rows = [
        (argument(action), action.help)
        for action in actions
        if not isinstance(action, argparse._HelpAction) and action.help != argparse.SUPPRESS
    ]
    if not rows:
        return []
    lines = ["| argument | meaning |", "| --- | --- |"]
    lines += [f"| {code(written)} | {cell(meaning or '')} |" for written, meaning in rows]
    return [*lines, ""]


def own_groups(parser: argparse.ArgumentParser) -> list:
    """The groups a command declares (envkit launch's: one per engine), after argparse's two."""
    return parser._action_groups[2:]


def command_section(name: str, parser: argparse.ArgumentParser, omit: frozenset[str] = frozenset()) -> list[str]:
    lines = [f"## `envkit {name}`", ""]
    if parser.description:
        lines += [cell(parser.description), ""]
    grouped = {id(action) for group in own_groups(parser) for action in group._group_actions}
    lines += table(action for action in parser._actions if id(action) not in grouped)
    if parser.epilog:
        lines += [cell(parser.epilog), ""]
    for group in own_groups(parser):
        if group.title in omit:
            continue
        lines += [f"### `envkit {name} {group.title}`", ""]
        if group.description:
            lines += [cell(group.description), ""]
        lines += table(group._group_actions)
    return lines


def cli_reference(omit: frozenset[str] = frozenset()) -> str:
    """The reference; ``omit``: groups left out (an engine the document has no section for yet)."""
    parser = build_parser()
    (commands,) = (action for action in parser._actions if isinstance(action, argparse._SubParsersAction))
    helps = {choice.dest: choice.help for choice in commands._choices_actions}
    lines = [HEADER, "| command | what it does |", "| --- | --- |"]
    lines += [f"| [`{name}`](#envkit-{name}) | {cell(helps.get(name) or '')} |" for name in commands.choices]
    lines.append("")
    for name, subparser in commands.choices.items():
        lines += command_section(name, subparser, omit)
    return "\n".join(lines).rstrip("\n") + "\n"


def undocumented_engines(text: str) -> frozenset[str]:
    """The engines of the registry docs/cli.md has no section for: a new engine is its module and one registry line,
    and --update-golden writes its section; every section the document has is compared."""
    documented = set(re.findall(r"^### `envkit launch (--on [^`]+)`$", text, re.MULTILINE))
    registered = {f"--on {name}" for name in engines.REGISTRY}
    assert documented <= registered, f"docs/cli.md documents engines no longer registered: {documented - registered}"
    return frozenset(registered - documented)


def test_docs_cli_md_is_the_parser(update_golden):
    if update_golden:
        CLI_MD.write_text(cli_reference(), encoding="utf-8")
    text = CLI_MD.read_text(encoding="utf-8")
    assert text == cli_reference(undocumented_engines(text)), (
        "docs/cli.md differs from envkit's parser: rerun with --update-golden"
    )


def test_an_engine_without_a_section_is_left_out_and_a_removed_one_is_caught(monkeypatch):
    text = cli_reference()
    without_kaggle = cli_reference(frozenset({"--on kaggle"}))
    assert "--kaggle-user" in text and "--kaggle-user" not in without_kaggle
    assert undocumented_engines(without_kaggle) == {"--on kaggle"}
    monkeypatch.setattr(engines, "REGISTRY", {name: e for name, e in engines.REGISTRY.items() if name != "kaggle"})
    with pytest.raises(AssertionError, match="no longer registered"):
        undocumented_engines(text)


def test_every_command_and_option_of_the_parser_is_in_the_reference():
    reference = cli_reference()
    parser = build_parser()
    (commands,) = (action for action in parser._actions if isinstance(action, argparse._SubParsersAction))
    assert commands.choices, "the parser has no commands"
    for name, subparser in commands.choices.items():
        assert f"## `envkit {name}`" in reference
        for action in subparser._actions:
            for flag in action.option_strings:
                assert flag in reference, (name, flag)
