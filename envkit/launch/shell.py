"""Shell lines built from words: every value is one quoted word.

The only unquoted text is a ``Raw`` fragment, and only envkit's own constants
(variable references such as "$SLURM_NNODES") are ever wrapped in it, never a
value that came from the user or the config.
"""

from __future__ import annotations

from envkit.support.shellquote import sh


class Raw(str):
    """A fragment envkit wrote itself, inserted as is (it may expand variables)."""


def line(*words: str) -> str:
    return " ".join(word if isinstance(word, Raw) else sh(word) for word in words)
