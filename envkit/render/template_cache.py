"""Compiled templates kept between runs: Jinja's own bytecode cache, under envkit's cache directory, and envkit's
own templates compiled ahead of time.

Compiling the templates is most of what rendering costs (about 12 of 13 ms for all
targets on the development machine); loading the compiled code back takes about 1 ms.
Jinja reuses code only while the template's source checksum matches, and the code
does not depend on the values rendered, so the output stays byte-identical.
On a cold cache (a new machine, a fresh ENVKIT_CACHE_DIR), the Python source Jinja would generate for each of
envkit's own templates is a module of envkit.render.shipped_templates (scripts/generate_validators.py writes them;
a test regenerates them), taken where the template's text and Jinja's settings are those it was generated from:
about 20 ms of parsing and code generation a cold render no longer pays (issue 42). Its code is read as Python
reads a module's, from the bytecode pip compiled at install (or Python wrote at the first read), never executed
as a module: compiling the code itself was another 8 ms of a cold render of one target.
"""

from __future__ import annotations

import hashlib
import os
from importlib.machinery import SourceFileLoader
from pathlib import Path
from types import CodeType

import jinja2

from envkit.render import shipped_templates
from envkit.support.cache import cache_dir, private_folder

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
    def get_bucket(self, environment, name, filename, source) -> jinja2.bccache.Bucket:
        # envkit's own template: its generated module is its cache, read where Jinja would read an entry (Jinja keeps
        # only a bucket it had to compile code for). An entry beside the module was a second copy of it, written at
        # every cold render: four files, 0.7 ms of its CPU (issue 42).
        code = shipped(environment, source, name, filename)
        if code is None:
            return super().get_bucket(environment, name, filename, source)
        bucket = jinja2.bccache.Bucket(environment, self.get_cache_key(name), self.get_source_checksum(source))
        bucket.code = code
        return bucket

    def get_cache_key(self, name: str, filename: str | None = None) -> str:
        # By template name alone, not its path: the source checksum already refuses a
        # stale entry, and the cache stays one file per template however many copies
        # of a project (tests make hundreds) render.
        return super().get_cache_key(name)

    def load_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        try:
            super().load_bytecode(bucket)
        except OSError:
            pass  # no folder yet, or a file in its way: the template is compiled, which only costs time

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        # The folder is made here, where an entry is written: a render of envkit's own templates alone (their code
        # shipped) writes none, and made two of a cold render's seven folders for it (issue 42).
        try:
            private_folder(Path(self.directory))
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


def template_cache(environment: jinja2.Environment) -> jinja2.BytecodeCache:
    """A bytecode cache for ``environment``, in envkit's cache directory (made, its user's alone, where an entry is
    first written; where it cannot be, nothing is kept, which only costs time)."""
    return _OptionalBytecodeCache(str(cache_dir() / "templates" / settings_key(environment)))


def shipped(environment: jinja2.Environment, source: str, name: str | None, filename: str | None) -> CodeType | None:
    """shipped_code, named as Jinja's compile(source, name, filename) names its code."""
    code = shipped_code(environment, source, name)
    return None if code is None else _named(code, filename or "<template>")


def shipped_code(environment: jinja2.Environment, source: str, name: str | None) -> CodeType | None:
    """The code of the module generated from template ``name``, where ``source`` is the text and ``environment``
    has the settings it was generated from; None otherwise, or where the module is missing (a wheel built
    without it) or damaged: Jinja compiles the template then, which only costs time."""
    module, sha256 = shipped_templates.TEMPLATES.get(name, (None, None))
    if module is None or shipped_templates.SETTINGS != settings_key(environment):
        return None
    if sha256 != hashlib.sha256(source.encode()).hexdigest():
        return None  # the project's own template of that name, or an edited one
    # Its file in the package's folder, where Python's finder looks (in a fifth of its time): read as a module's code
    # is, from the bytecode pip compiled at install or Python writes at the first read.
    path = os.path.join(shipped_templates.__path__[0], f"{module}.py")
    loader = SourceFileLoader(f"{shipped_templates.__name__}.{module}", path)
    try:
        return loader.get_code(loader.name)
    except (ImportError, OSError, SyntaxError, ValueError):  # missing, unreadable or damaged: compiled from the text
        return None


def _named(code: CodeType, filename: str) -> CodeType:
    """``code`` and the functions in it with ``filename``, as compile(source, filename) names them: Jinja takes a
    template's file from its code, and its tracebacks name the template, not the generated module."""
    constants = tuple(
        _named(constant, filename) if isinstance(constant, CodeType) else constant for constant in code.co_consts
    )
    return code.replace(co_filename=filename, co_consts=constants)
