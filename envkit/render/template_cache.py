"""Compiled templates kept between runs: Jinja's own bytecode cache, under envkit's cache directory, and envkit's
own templates compiled ahead of time.

Compiling the templates is most of what rendering costs (about 12 of 13 ms for all
targets on the development machine); loading the compiled code back takes about 1 ms.
Jinja reuses code only while the template's source checksum matches, and the code
does not depend on the values rendered, so the output stays byte-identical.
On a cold cache (a new machine, a fresh ENVKIT_CACHE_DIR), the Python source Jinja would generate for each of
envkit's own templates is read from envkit/data/templates.json (scripts/generate_validators.py writes it; a test
regenerates it), where the template's text and Jinja's settings are those it was generated from: about 20 ms of
parsing and code generation a cold render no longer pays (issue 42).
"""

from __future__ import annotations

import functools
import hashlib

import jinja2

from envkit.errors import EnvkitError
from envkit.project.datafile import DATA_DIR
from envkit.support.bounded_load import load_json
from envkit.support.cache import cache_dir

# envkit's templates as Jinja compiles them, generated ahead of time: the settings and each template's sha256 and code.
SHIPPED = DATA_DIR / "templates.json"

# Jinja keys compiled code by template path and source only; these settings change
# the code too, so they name the directory it is kept in.
_SYNTAX_SETTINGS = (
    "block_start_string",
    "block_end_string",
    "variable_start_string",
    "variable_end_string",
    "comment_start_string",
    "comment_end_string",
    "line_statement_prefix",
    "line_comment_prefix",
    "trim_blocks",
    "lstrip_blocks",
    "newline_sequence",
    "keep_trailing_newline",
    "optimized",
    "autoescape",
)


class _OptionalBytecodeCache(jinja2.FileSystemBytecodeCache):
    def get_cache_key(self, name: str, filename: str | None = None) -> str:
        # By template name alone, not its path: the source checksum already refuses a
        # stale entry, and the cache stays one file per template however many copies
        # of a project (tests make hundreds) render.
        return super().get_cache_key(name)

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        try:
            super().dump_bytecode(bucket)
        except OSError:
            pass  # a cache that cannot be written only costs time


def settings_key(environment: jinja2.Environment) -> str:
    """What, besides a template's text, makes its compiled code: Jinja's version and ``environment``'s settings."""
    settings = [
        jinja2.__version__,
        sorted(environment.extensions),
        *(getattr(environment, s) for s in _SYNTAX_SETTINGS),
    ]
    return hashlib.sha256(repr(settings).encode()).hexdigest()[:16]


def template_cache(environment: jinja2.Environment) -> jinja2.BytecodeCache | None:
    """A bytecode cache for ``environment``, or None where the cache directory cannot be made."""
    directory = cache_dir() / "templates" / settings_key(environment)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return _OptionalBytecodeCache(str(directory))


class Environment(jinja2.Environment):
    """Jinja's environment, compiling envkit's own templates from the code generated ahead of time."""

    def compile(self, source, name=None, filename=None, raw=False, defer_init=False):
        # A template's code as Jinja's compile(source, name, filename) gives it (its generated Python, compiled),
        # where envkit's own template has the text and this environment the settings it was generated with.
        plain = isinstance(source, str) and not (raw or defer_init)
        shipped = _shipped().get(settings_key(self), {}).get(name) if plain else None
        if shipped is not None and shipped["sha256"] == hashlib.sha256(source.encode()).hexdigest():
            return compile(shipped["code"], filename or "<template>", "exec")
        return super().compile(source, name, filename, raw, defer_init)


@functools.cache
def _shipped() -> dict:
    """templates.json's templates under the settings key they were generated with; none where it is missing."""
    try:
        shipped = load_json(SHIPPED)
        return {shipped["settings"]: shipped["templates"]}
    except (EnvkitError, KeyError, TypeError):  # missing or malformed: compiling, as before, only costs time
        return {}
