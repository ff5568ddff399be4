"""Quoting for values that reach a shell or a Dockerfile (Jinja filters).

Config validation already rejects shell metacharacters where a value has no
business holding them; quoting here is the second line of defence, so that
whatever passes validation still reaches the shell as one literal word.
"""

from __future__ import annotations

import shlex


def sh(value: object) -> str:
    """One shell word, exactly as Python's shlex.quote (run.sh's dry run matches it)."""
    return shlex.quote(str(value))


def command_line(env: dict[str, str], argv: tuple[str, ...] | list[str]) -> str:
    """A command as one shell line: its variables (VAR=value, in order), then its words."""
    return " ".join([f"{key}={sh(value)}" for key, value in env.items()] + [shlex.join(argv)])


def dockerfile_string(value: object) -> str:
    """A double-quoted Dockerfile value (ENV, LABEL); validation has removed $, quotes and backslashes."""
    text = str(value)
    if any(char in text for char in '$"\\\n'):
        raise ValueError(f"cannot place {text!r} in a Dockerfile string")
    return f'"{text}"'


FILTERS = {"sh": sh, "dq": dockerfile_string}
