"""Every project or user file envkit reads or hashes comes through here: a regular file, its size,
and for YAML and JSON its depth and aliases capped (tests/support/test_bounded_load_reads.py finds any other read).

A config, a results directory or a saved image may come from anyone, and three small
files could otherwise take a machine down before any check ran: nine nested YAML
anchors of nine aliases each expand to 9**9 nodes from 300 bytes (the "billion
laughs"); a few thousand nested brackets overflow the C stack of libyaml's composer,
which is a segfault, not an exception; /dev/zero or a 100 MB file is read whole before
anything can refuse it, and a FIFO named like a results file blocks the first read forever. Each cap is far above
what envkit's own files need (the largest,
matrix.yaml, has about 1,500 nodes and depth 6).

YAML is parsed by libyaml's C parser where PyYAML has it, and composed by PyYAML's own
Composer with the caps counted on the way (0.7 ms more than yaml.CSafeLoader on matrix.yaml,
benchmarks/bench_bounded_load.py), so nothing is expanded, nested or read beyond a cap. PyYAML is imported only
when YAML is read: a remembered render (envkit.render.memo) reads JSON alone. A refusal is
``Refused``: a ValueError with one line of reason and, where known, the line number.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import marshal
import os
import re
import stat
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cache, lru_cache
from pathlib import Path
from typing import IO, Any, BinaryIO

from envkit import __version__
from envkit.errors import EnvkitError
from envkit.support.cache import cache_dir, keep, used

MAX_BYTES = 16 * 2**20  # a results file with every installed distribution is about 20 KB
MAX_DEPTH = 64  # nesting of mappings and lists, aliases expanded
MAX_ALIASES = 100  # *references to &anchors
MAX_NODES = 100_000  # scalars, lists and mappings, aliases expanded
_CHUNK = 2**16  # what one read asks for: a buffer that small costs nothing to allocate


class Refused(ValueError):
    """Input envkit will not read: ``reason`` is one line, ``line`` the 1-based line where known."""

    def __init__(self, reason: str, line: int | None = None):
        super().__init__(reason)
        self.reason = reason
        self.line = line

    def at(self, path: str | os.PathLike) -> str:
        """The one-line message naming the file (and line)."""
        return f"{path}:{self.line}: {self.reason}" if self.line else f"{path}: {self.reason}"


# What a render read, for its memo (envkit.render.memo): every path opened here, or looked at with note(), while a
# recording() block runs; VOLATILE when what was read cannot be told by the files' bytes alone.
_recorders: list[set[str]] = []
VOLATILE = "\0volatile"


@contextmanager
def recording() -> Iterator[set[str]]:
    """The absolute paths read (opened, tried, or noted) while the block runs: a render's inputs, by construction."""
    seen: set[str] = set()
    _recorders.append(seen)
    try:
        yield seen
    finally:
        _recorders.remove(seen)


def note(path: str | os.PathLike) -> None:
    """Record ``path`` as read without opening it: a file looked for and perhaps absent (a template override, a
    lock), a folder whose listing was read, a file a cache or a subprocess (git's index) read instead."""
    for seen in _recorders:
        seen.add(os.path.abspath(path))


def volatile() -> None:
    """Record that what was read is more than files' bytes (a folder walked whole): nothing may be remembered."""
    for seen in _recorders:
        seen.add(VOLATILE)


def open_regular(path: str | os.PathLike) -> BinaryIO:
    """The file opened for reading; Refused unread when it is not a regular file, OSError for the caller.

    Opened without blocking, then checked: a FIFO named like a results file would otherwise wait
    forever for a writer, and /dev/zero or a directory has no size to cap by. Recorded, tried or not.
    """
    note(path)
    handle = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        kind = _not_regular(os.fstat(handle).st_mode)
        if kind:
            raise Refused(f"{kind}, not a regular file")
        os.set_blocking(handle, True)
        return os.fdopen(handle, "rb")
    except BaseException:
        os.close(handle)
        raise


def _not_regular(mode: int) -> str | None:
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a special file"


def read_bytes(path: str | os.PathLike, limit: int = MAX_BYTES) -> bytes:
    """The file's bytes, refused unread when it is not a regular file or larger than ``limit``; OSError for the
    caller."""
    with open_regular(path) as stream:
        if os.fstat(stream.fileno()).st_size > limit:
            raise Refused(_too_large(limit))
        return read_stream(stream, limit)  # the size may have grown since


def read_text(path: str | os.PathLike, limit: int = MAX_BYTES) -> str:
    """The file's UTF-8 text, refused as read_bytes refuses, or when it is not UTF-8; OSError for the caller."""
    return decode(read_bytes(path, limit))


def hash_file(path: str | os.PathLike, hasher: Any, limit: int | None = MAX_BYTES) -> Any:
    """``hasher`` updated with the file's bytes, read in chunks and refused past ``limit``.

    ``limit`` None is for what is large by nature and hashed without being held (an image
    tarball, a staged wheel); a FIFO or a device is refused all the same.
    """
    with open_regular(path) as stream:
        if limit is not None and os.fstat(stream.fileno()).st_size > limit:
            raise Refused(_too_large(limit))
        seen, buffer = 0, bytearray(_CHUNK)
        chunk = memoryview(buffer)
        while size := stream.readinto(buffer):
            seen += size
            if limit is not None and seen > limit:
                raise Refused(_too_large(limit))
            hasher.update(chunk[:size])
    return hasher


def sha256(path: str | os.PathLike, limit: int | None = MAX_BYTES) -> str:
    """The file's sha256 in hex, refused as hash_file refuses."""
    return hash_file(path, hashlib.sha256(), limit).hexdigest()


def read_stream(stream: IO[bytes], limit: int = MAX_BYTES) -> bytes:
    """At most ``limit`` bytes of a stream (a pipe, /dev/zero, a member of a tarball), else Refused."""
    # In chunks: read(limit + 1) would allocate the whole limit first, for every file however small (most are a
    # few KB), and that cost more than reading them.
    chunks, seen = [], 0
    while seen <= limit and (chunk := stream.read(min(_CHUNK, limit + 1 - seen))):
        chunks.append(chunk)
        seen += len(chunk)
    if seen > limit:
        raise Refused(_too_large(limit))
    return b"".join(chunks)


def decode(data: bytes) -> str:
    """UTF-8 text without NUL bytes: no file envkit reads as text holds one, and a NUL
    means a binary file (or a corrupted one) was given."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Refused(f"not UTF-8 text (byte {exc.start})") from None
    if "\0" in text:
        raise Refused(f"not text: a NUL byte at byte {data.index(0)}")
    return text


def _too_large(limit: int) -> str:
    return f"larger than {limit // 2**20} MiB, more than any file envkit reads; is it the right file?"


def parse_json(text: str | bytes, *, walk: bool = True) -> Any:
    """A JSON document nested at most MAX_DEPTH deep. ``walk=False``: not walked for its depth, which guards envkit
    against a user's documents, for a file envkit ships and its tests regenerate (the tables of envkit/data/: the
    walk was a third of a millisecond of every render that loads one, issue 42)."""
    try:
        document = json.loads(text)
    except RecursionError:
        raise Refused(f"nested deeper than {MAX_DEPTH} levels") from None
    except json.JSONDecodeError as exc:
        raise Refused(
            f"not valid JSON, partial or malformed ({exc.msg}: line {exc.lineno} column {exc.colno})", exc.lineno
        ) from None
    except ValueError as exc:  # e.g. an integer longer than Python converts
        raise Refused(f"not valid JSON ({_in_words(exc)})") from None
    if walk:
        _check_depth(document)
    return document


def _in_words(error: ValueError) -> str:
    """A parser's ValueError as one line; Python's advice to raise its integer limit
    (sys.set_int_max_str_digits) is for programmers, not for whoever wrote the file."""
    digits = re.search(r"Exceeds the limit \((\d+) digits\)", str(error))
    return f"an integer of more than {digits.group(1)} digits" if digits else " ".join(str(error).split())


def _check_depth(document: Any) -> None:
    # Iterative: a recursive walk is what a deep document would break.
    pending = [(document, 1)]
    while pending:
        value, depth = pending.pop()
        if isinstance(value, (dict, list)):
            if depth > MAX_DEPTH:
                raise Refused(f"nested deeper than {MAX_DEPTH} levels")
            pending.extend((child, depth + 1) for child in (value.values() if isinstance(value, dict) else value))


def load_json(path: str | os.PathLike, *, walk: bool = True) -> Any:
    """The JSON file at ``path``; any problem is one EnvkitError line naming it. ``walk``: as parse_json's."""
    return _load(path, lambda text: parse_json(text, walk=walk))


def load_yaml(path: str | os.PathLike) -> Any:
    """The YAML file at ``path`` (one document, safe types only); any problem is one EnvkitError line naming it."""
    return _load(path, parse_yaml)


def load_yaml_kept(path: str | os.PathLike) -> Any:
    """load_yaml, the document kept in envkit's cache as parse_yaml_kept keeps it."""
    return _load(path, lambda text: parse_yaml_kept(text, "data")[0])


# Documents kept parsed: a user's projects' configs and envkit's own tables, each as its last few edits left it.
PARSED_ENTRIES = 512


def parse_yaml_kept(text: str, name: str, index: Callable[[Any], Any] | None = None) -> tuple[Any, Any]:
    """parse_yaml's document and what ``index`` made of its composed tree (None without one), kept in envkit's
    cache by the text's sha256 and ``name`` (what ``index`` makes), so that a document read again unchanged (a
    project's envkit.yaml at every render and experiment) is read without importing PyYAML: about 15 ms of CPU
    (benchmarks/bench_render.py). Only what marshal gives back whole is kept (a date is not); an error is never."""
    if index is None and text in _read_here:
        return marshal.loads(_read_here[text])[0], None
    entry = _kept_entry(text, name, index)
    try:
        with open(entry, "rb") as stream:
            data = stream.read()
        kept = marshal.loads(data)
        if isinstance(kept, tuple) and len(kept) == 2:
            used(entry)
            _here(text, data)
            return kept
    except (OSError, EOFError, ValueError, TypeError):
        pass  # not kept yet, or damaged: parsed again
    indexed = []
    document = parse_yaml(text, None if index is None else lambda node: indexed.append(index(node)))
    parsed = (document, indexed[0] if indexed else None)
    try:
        data = marshal.dumps(parsed)
    except ValueError:
        return parsed  # a type marshal does not write (a date): parsed every time
    keep(entry, data, at_most=PARSED_ENTRIES)
    _here(text, data)
    return parsed


# The documents this process parsed or read back lately, by their text, as marshal wrote them: a second reader of
# a text with no index (the experiments table's, after envkit.yaml's own read with its lines) takes a copy of the
# document, neither parsing it again nor keeping a second entry (about 1 ms of a cold render, issue 42). A few: a
# command reads one project's envkit.yaml; a test session reads thousands.
READ_HERE = 4
_read_here: dict[str, bytes] = {}


def _here(text: str, data: bytes) -> None:
    _read_here.pop(text, None)
    _read_here[text] = data
    while len(_read_here) > READ_HERE:
        del _read_here[next(iter(_read_here))]  # the least recently read


def _kept_entry(text: str, name: str, index: Callable[[Any], Any] | None) -> Path:
    """The cache file of ``text`` parsed for ``name`` by this envkit (its version, this module's loader and caps,
    the source of ``index``'s module) and this PyYAML (its package's path, size and modification time: an upgrade
    rewrites it)."""
    spec = importlib.util.find_spec("yaml")
    found = os.stat(spec.origin) if spec and spec.origin else None
    sources = [__file__, getattr(sys.modules[index.__module__], "__file__", None) if index is not None else None]
    key = [__version__, name, text, [source_digest(source) for source in sources if source]]
    key += [spec.origin, found.st_size, found.st_mtime_ns] if found else []
    return cache_dir() / "yaml" / f"{hashlib.sha256(json.dumps(key).encode()).hexdigest()}.marshal"


@cache
def source_digest(path: str) -> str:
    """The sha256 of one of envkit's own modules, read once per process: what a kept result is keyed by."""
    with open(path, "rb") as stream:
        return hashlib.sha256(stream.read()).hexdigest()


def load_text(path: str | os.PathLike) -> str:
    """The UTF-8 text file at ``path``; any problem is one EnvkitError line naming it."""
    return _load(path, str)


def load_bytes(path: str | os.PathLike) -> bytes:
    """The file at ``path``; any problem is one EnvkitError line naming it."""
    return _load(path, bytes, read_bytes)


def _load(path: str | os.PathLike, parse: Callable[[Any], Any], read: Callable[[Any], Any] = read_text) -> Any:
    try:
        return parse(read(path))
    except Refused as exc:
        raise EnvkitError(exc.at(path)) from None
    except OSError as exc:
        raise EnvkitError(f"{path}: cannot read: {exc.strerror or exc}") from None


def parse_yaml(text: str, index: Callable[[Any], None] | None = None) -> Any:
    """One YAML document built from safe types; ``index(node)`` sees the composed tree before it is built."""
    import yaml

    loader = _loader_class()(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        if index is not None:
            index(node)
        return loader.construct_document(node)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = exc.problem or exc.context or "syntax error"
        if exc.context and exc.context.startswith("found"):  # "found duplicate anchor 'a'; ...": the context says what
            problem = exc.context
        elif exc.context and problem.startswith(
            "but "
        ):  # "expected a single document in the stream, but found another"
            problem = f"{exc.context}, {problem}"
        problem = " ".join(str(problem).split())
        raise Refused(f"malformed YAML: {problem}", mark.line + 1 if mark else None) from None
    except yaml.YAMLError as exc:
        raise Refused(f"malformed YAML: {' '.join(str(exc).split())}") from None
    except ValueError as exc:
        if isinstance(exc, Refused):
            raise
        # A date such as 2024-13-01, or an integer longer than Python converts.
        raise Refused(f"malformed YAML: {_in_words(exc)}") from None
    finally:
        loader.dispose()


@lru_cache(maxsize=1)
def _loader_class() -> type:
    """PyYAML's safe loader with a Composer that counts values, nesting and aliases as it goes."""
    from yaml.composer import Composer
    from yaml.constructor import SafeConstructor
    from yaml.events import AliasEvent, ScalarEvent
    from yaml.resolver import Resolver

    class CappedComposer(Composer):
        def __init__(self) -> None:
            super().__init__()
            self._nodes = 0
            self._aliases = 0
            self._depth = 0  # lists and mappings around (and including) the node being composed
            self._deepest = 0  # the deepest nesting reached inside the node being composed
            self._expanded: dict[str, tuple[int, int]] = {}  # anchor -> (values, levels below its parent)

        def compose_node(self, parent, index):
            event = self.peek_event()
            if event.__class__ is ScalarEvent:  # most values: no nesting, checked with the least work
                self._nodes += 1
                if self._nodes > MAX_NODES:
                    self._count(0, self._depth, event)
                if event.anchor is not None:
                    self._expanded[event.anchor] = (1, 0)
                return Composer.compose_node(self, parent, index)
            if event.__class__ is AliasEvent:
                self._aliases += 1
                if self._aliases > MAX_ALIASES:
                    raise Refused(f"more than {MAX_ALIASES} aliases (*name)", event.start_mark.line + 1)
                if event.anchor in self.anchors and event.anchor not in self._expanded:
                    raise Refused(f"alias *{event.anchor} is inside the node it names", event.start_mark.line + 1)
                values, levels = self._expanded.get(event.anchor, (0, 0))  # an unknown alias: PyYAML says so
                self._count(values, self._depth + levels, event)
                return Composer.compose_node(self, parent, index)
            outer_depth, outer_deepest, start = self._depth, self._deepest, self._nodes
            self._depth += 1
            self._deepest = self._depth
            self._count(1, self._depth, event)
            node = Composer.compose_node(self, parent, index)
            if event.anchor is not None:
                self._expanded[event.anchor] = (self._nodes - start, self._deepest - outer_depth)
            self._depth, self._deepest = outer_depth, max(outer_deepest, self._deepest)
            return node

        def _count(self, values: int, depth: int, event) -> None:
            self._nodes += values
            self._deepest = max(self._deepest, depth)
            if depth > MAX_DEPTH:
                raise Refused(f"nested deeper than {MAX_DEPTH} levels", event.start_mark.line + 1)
            if self._nodes > MAX_NODES:
                raise Refused(f"more than {MAX_NODES} values once aliases are expanded", event.start_mark.line + 1)

    try:  # libyaml's C parser where PyYAML was built with it
        from yaml.cyaml import CParser
    except ImportError:  # pragma: no cover - PyYAML without libyaml
        from yaml.parser import Parser
        from yaml.reader import Reader
        from yaml.scanner import Scanner

        class PurePythonLoader(CappedComposer, Reader, Scanner, Parser, SafeConstructor, Resolver):
            def __init__(self, stream: str):
                Reader.__init__(self, stream)
                Scanner.__init__(self)
                Parser.__init__(self)
                CappedComposer.__init__(self)
                SafeConstructor.__init__(self)
                Resolver.__init__(self)

        return PurePythonLoader

    class BoundedLoader(CappedComposer, CParser, SafeConstructor, Resolver):
        def __init__(self, stream: str):
            CParser.__init__(self, stream)
            CappedComposer.__init__(self)
            SafeConstructor.__init__(self)
            Resolver.__init__(self)

    return BoundedLoader
