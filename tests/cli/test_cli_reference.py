"""docs/cli.md is envkit's parser written out: every command, option, choice and help line, so it cannot drift.

Written from the parser's actions, not from argparse's --help text, whose wording and wrapping change between
Python releases. `pytest --update-golden tests/cli/test_cli_reference.py` rewrites it after a change to the CLI.
"""

from __future__ import annotations

import argparse

from paths import REPO_ROOT

from envkit.cli import build_parser

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


def command_section(name: str, parser: argparse.ArgumentParser) -> list[str]:
    lines = [f"## `envkit {name}`", ""]
    if parser.description:
        lines += [cell(parser.description), ""]
    rows = [
        (argument(action), action.help)
        for action in parser._actions
        if not isinstance(action, argparse._HelpAction) and action.help != argparse.SUPPRESS
    ]
    if rows:
        lines += ["| argument | meaning |", "| --- | --- |"]
        lines += [f"| {code(written)} | {cell(meaning or '')} |" for written, meaning in rows]
        lines.append("")
    if parser.epilog:
        lines += [cell(parser.epilog), ""]
    return lines


def cli_reference() -> str:
    parser = build_parser()
    (commands,) = (action for action in parser._actions if isinstance(action, argparse._SubParsersAction))
    helps = {choice.dest: choice.help for choice in commands._choices_actions}
    lines = [HEADER, "| command | what it does |", "| --- | --- |"]
    lines += [f"| [`{name}`](#envkit-{name}) | {cell(helps.get(name) or '')} |" for name in commands.choices]
    lines.append("")
    for name, subparser in commands.choices.items():
        lines += command_section(name, subparser)
    return "\n".join(lines).rstrip("\n") + "\n"


def test_docs_cli_md_is_the_parser(update_golden):
    written = cli_reference()
    if update_golden:
        CLI_MD.write_text(written, encoding="utf-8")
    assert CLI_MD.read_text(encoding="utf-8") == written, (
        "docs/cli.md differs from envkit's parser: rerun with --update-golden"
    )


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
