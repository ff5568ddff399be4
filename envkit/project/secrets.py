"""Files that look like secrets, by name or by content: kept out of images and notebooks unless listed.

An image is pushed and a notebook is committed or shared: either publishes every file it holds. A file
whose name says it holds credentials (``.env``, ``id_rsa``, ``.netrc``, ``*.pem``...), or a backup or copy of
one (``.netrc.bak``, ``kaggle (1).json``), or whose bytes hold a private key or a token is left out, and the
caller names it in one line; the project's ``include_secrets`` list in envkit.yaml is the only way in
(docs/secrets.md says why these lists).

Names are envkit's own rules: the union of what ``docker init`` writes into a new .dockerignore and the
credential files gitleaks' and GitHub's secret scanning look for. Contents are detect-secrets' detectors that
decide by a token's form (its plugins, imported when a file is first read, so that no command pays for them at
start), and envkit's own rules only for what those lack (``SECRET_CONTENT``). Neither guesses from entropy or a
nearby keyword: a 32-hex string may be a hash as easily as a key, and such a rule would leave out ordinary files.
"""

import base64
import codecs
import fnmatch
import functools
import json
import os
import re
import string
import sys
from collections.abc import Callable, Iterator
from pathlib import PurePosixPath
from typing import BinaryIO, NamedTuple

from envkit.project.secret_verdicts import shipped_release_installed

# Whole-name patterns (fnmatch) of one path component: a file so named, or any file under a folder so named.
SECRET_NAMES = (
    ".env",
    ".env.*",
    ".envrc",
    "*.pem",
    "*.key",
    "*.p12",
    "*.pfx",
    "*.jks",
    "*.keystore",
    "*.ppk",
    "*.ovpn",
    "id_rsa*",
    "id_dsa*",
    "id_ecdsa*",
    "id_ed25519*",
    "_netrc",
    "credentials",
    "credentials*.json",
    "client_secret*.json",
    "service-account*.json",
    "secrets.*",
    "*.tfstate",
    "*.tfvars",
    "*.kdbx",
    "*.keytab",
    "kaggle.json",
    "application_default_credentials.json",
    "kubeconfig",
    "kubeconfig.*",
    "*.kubeconfig",
)
# A tool's dotfile that holds its credentials whole. Copied into a project it loses its dot or gains an
# extension (npmrc, pypirc.cfg, .yarnrc.yml) and holds the same: either is a secret too.
CREDENTIAL_DOTFILES = (
    ".netrc",
    ".npmrc",
    ".yarnrc",
    ".pypirc",
    ".git-credentials",
    ".pgpass",
    ".htpasswd",
    ".s3cfg",
    ".boto",
    ".dockercfg",
    ".vault-token",
    ".databrickscfg",
)
CONFIG_EXTENSIONS = ("", ".cfg", ".conf", ".ini", ".txt", ".yml", ".yaml", ".json", ".toml")
SECRET_FOLDERS = (".aws", ".azure", ".ssh", ".gnupg", ".docker", ".kube", ".kaggle", ".huggingface", "secrets")
# A token file that only its folder names: the Hugging Face CLI's (~/.cache/huggingface/token) and gcloud's.
SECRET_PATHS = ("huggingface/token", "huggingface/stored_tokens", "gcloud/credentials.db", "gcloud/access_tokens.db")
# What an editor, a backup or a copy adds to a name: ~ and #name# (Emacs), .swp (Vim, which also adds a leading
# dot), .bak/.orig/.old... by hand or by patch, .1 by rotation (and terraform.tfstate.<time>.backup), and a file
# manager's or a browser's copy before the extension (kaggle (1).json, .env copy).
_DECORATION = (
    r"~$|\.(?:bak|backup|orig|old|save|sav|tmp|prev|copy|sw[a-p]|\d+)$|^#(?=.+#$)|(?<=.)#$"
    r"|(?: - copy| copy(?: \d+)?| ?\(\d+\))(?=\.[^.]*$|$)"
)

# envkit's own content rules: only what detect-secrets' detectors lack (docs/secrets.md has the table). A
# private key's header (PEM, OpenSSH, PGP, PuTTY) or a token whose prefix its issuer fixed: few false alarms.
# None begins with \b, which would cost re its search for the literal prefix (four times slower): a match that
# begins inside a word is refused after (_accepted), as a detector's is.
SECRET_CONTENT = (
    # detect-secrets' PrivateKeyDetector lists eight headers (not PKCS#8's ENCRYPTED PRIVATE KEY, not PuTTY 3)
    ("a private key", rb"-----BEGIN[ A-Z0-9_-]{0,100}PRIVATE KEY(?: BLOCK)?-----|PuTTY-User-Key-File-\d"),
    ("a GitHub token", rb"github_pat_[0-9A-Za-z_]{82}\b"),  # detect-secrets has the classic ghp_... only
    ("a Hugging Face token", rb"(?:hf_|api_org_)[A-Za-z]{34}\b"),
    # detect-secrets' needs 20 letters or digits on each side of T3BlbkFJ; project keys hold - and _ there
    ("an OpenAI key", rb"sk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}T3BlbkFJ[A-Za-z0-9_-]{20,}"),
    ("an Anthropic key", rb"sk-ant-(?:api|admin)\d\d-[A-Za-z0-9_-]{80,}"),
    ("a Google API key", rb"AIza[0-9A-Za-z_-]{35}\b"),
    ("a Google OAuth client secret", rb"GOCSPX-[0-9A-Za-z_-]{28}"),
    ("a Slack app token", rb"xapp-\d+-[0-9A-Za-z]+-\d+-[0-9A-Za-z]{16,}"),
    ("an npm token", rb"npm_[A-Za-z0-9]{36}\b"),  # detect-secrets' needs .npmrc's //host/:_authToken= before it
    ("a package index upload token", rb"pypi-AgE[A-Za-z0-9_-]{50,}"),  # detect-secrets': two indexes' only
    ("a Replicate token", rb"r8_[0-9A-Za-z]{37}\b"),
    ("a Groq key", rb"gsk_[0-9A-Za-z]{52}\b"),
    ("a Databricks token", rb"dapi[0-9a-h]{32}(?:-\d)?\b"),
    # docker login's config.json (auths: {registry: {auth: base64 of user:password}}), under any name
    ("a registry login", rb'"auths"\s*:\s*\{(?s:.){0,4096}?"(?:auth|identitytoken)"\s*:\s*"[^"\s]{8,}"'),
    # a URL's password before its host, the user may be empty (redis://:pw@); a placeholder for it is none: a
    # variable ($TOKEN, ${TOKEN}, $(TOKEN)), one in angle or curly brackets, stars. detect-secrets' rule
    # refuses a $ anywhere in the password (so misses pa$$word) and an empty user, and takes <password>. It
    # begins at :// (a literal, which re searches fast), the scheme before it being any.
    (
        "a password in a URL",
        rb"://[^\s:/?#@'\"<>`]*:"
        rb"(?!\$(?:\{\w+\}|\(\w+\)|\w+)@)[^\s/?#@'\"<>`{}*]{3,}@",
    ),
)
# "-----BEGIN " in base64 begins a PEM block stored encoded, as a kubeconfig's client-key-data and a Kubernetes
# Secret's tls.key are: its first 90 bytes decoded hold the header.
BASE64_PEM = r"LS0tLS1CRUdJTi[A-Za-z0-9+/]{8,106}"
# detect-secrets' detectors left unused: envkit's rules above cover more (BasicAuthDetector,
# PrivateKeyDetector); a public IP address is no credential; and four decide by a keyword before a value, whose
# prefix may be empty (IbmCloudIamDetector takes any token = "<44 characters>", IbmCosHmacDetector any
# secret_key = "<48 hex digits>"), as KeywordDetector does, and took more than half the scan's time. Those that
# guess from entropy or a keyword (Base64HighEntropyString, HexHighEntropyString, KeywordDetector) are not
# regex-based and so never taken.
_UNUSED_DETECTORS = (
    "BasicAuthDetector",
    "PrivateKeyDetector",
    "IPPublicDetector",
    "IbmCloudIamDetector",
    "IbmCosHmacDetector",
    "CloudantDetector",
    "SoftlayerDetector",
)

# A detector's pattern that stops short of its token, by secret type (the same for detect-secrets' detectors and
# the patterns shipped from them), replaced where text is redacted (the detector still decides
# whether a match is one): JwtTokenDetector's ends lazily (``\.?[...]*?``), so its match is the header and the
# payload, and the signature, which identifies the token as well, was left after the label. A JWE's five parts are
# one token too; a sentence's full stop after it is not part of it.
_REDACTED_WHOLE = {"JSON Web Token": r"eyJ[A-Za-z0-9_=-]+\.[A-Za-z0-9_=-]+(?:\.[A-Za-z0-9_+/=-]+)*"}
# Read in blocks when a file is searched for secrets, each block with the end of the one before it: a key
# header or a token straddling two blocks is found too (none is longer than this overlap).
SCAN_BLOCK = 1 << 20
SCAN_OVERLAP = 4096
# A token begins a word: a match that begins inside a run of these is none (a zip's zero bytes encode in base64
# as ABIAAAAA..., which AWSKeyDetector's pattern, with no boundary, takes for a key: a notebook's embedded files).
_WORD_CHARACTERS = frozenset(string.ascii_letters + string.digits + "_+/")
# detect-secrets' patterns are written for a line (its own scanner feeds them one at a time), and NpmDetector's
# //.+/:_authToken takes time quadratic in a line's length: a notebook's embedded file or minified code is one
# line of megabytes. Longer lines are cut into windows that overlap by SCAN_OVERLAP.
_LINE = 1 << 16
# Windows' PowerShell writes text (`Out-File`, `>`) in UTF-16 with a byte order mark: read as its characters.
_UTF16_BOMS = (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)


def by_name(path: str) -> str | None:
    """Why the relative POSIX ``path`` looks like a secret by its name (the pattern), or None. Case is ignored,
    as gitleaks' path rules ignore it: ``.ENV`` and ``Server.PEM`` hold what ``.env`` and ``server.pem`` do."""
    parts = PurePosixPath(path).parts
    for folder in parts[:-1]:
        if folder.lower() in SECRET_FOLDERS:
            return f"under {folder}/"
    for pattern in SECRET_PATHS:
        if fnmatch.fnmatchcase("/".join(parts[-pattern.count("/") - 1 :]).lower(), pattern):
            return f"named {pattern}"
    name = parts[-1].lower()
    why, plain = _named(name), _undecorated(name)
    if why is not None or plain == name:
        return why
    # Vim's swap file of kaggle.json is .kaggle.json.swp: the dot is Vim's
    why = _named(plain) or (_named(plain[1:]) if plain.startswith(".") else None)
    return None if why is None else f"{why} (a backup or copy)"


def _named(name: str) -> str | None:
    pattern = next((pattern for pattern in SECRET_NAMES if fnmatch.fnmatchcase(name, pattern)), None)
    if pattern is not None:
        return f"named {pattern}"
    stem, extension = os.path.splitext(name.removeprefix("."))
    if f".{stem}" in CREDENTIAL_DOTFILES and extension in CONFIG_EXTENSIONS:
        return f"named .{stem}" if name == f".{stem}" else f"named like .{stem}"
    return None


def _undecorated(name: str) -> str:
    """``name`` less every backup or copy decoration (.netrc.bak.1 -> .netrc); ``name`` when it has none."""
    while (plain := _compiled(_DECORATION).sub("", name)) not in (name, ""):
        name = plain
    return name


def by_content(data: bytes) -> str | None:
    """What secret ``data`` holds (a private key, a GitHub token...), or None."""
    text = _windowed(data.decode("utf-8", "surrogateescape"))
    own = _first(_own_rules(), text)
    if own is not None:
        return f"holds {own.secret_type}"
    for encoded in _pattern(BASE64_PEM).finditer(text):
        found = encoded.group()
        if _compiled(SECRET_CONTENT[0][1]).search(base64.b64decode(found[: len(found) // 4 * 4])):
            return f"holds {SECRET_CONTENT[0][0]} (base64)"
    detector = _first(_detectors(), text)
    return None if detector is None else f'holds a secret detect-secrets calls "{detector.secret_type}"'


def in_stream(stream: BinaryIO) -> str | None:
    """What secret a binary stream holds (``by_content``), read in blocks of ``SCAN_BLOCK`` bytes."""
    tail, decoder = b"", None
    while raw := stream.read(SCAN_BLOCK):
        if decoder is None:  # the first block says whether the text is UTF-16
            utf16 = raw.startswith(_UTF16_BOMS)
            decoder = codecs.getincrementaldecoder("utf-16")("replace") if utf16 else False
        block = decoder.decode(raw).encode("utf-8", "surrogatepass") if decoder else raw
        why = by_content(tail + block)
        if why is not None:
            return why
        tail = block[-SCAN_OVERLAP:]
    return None


def redacted(text: str) -> str:
    """``text`` with each secret the content rules find replaced by what it is: for what envkit publishes besides
    files (a report's arguments and a failed run's stderr, which a program may have printed a token into)."""
    for rule in _own_rules() + _detectors():
        # Each pattern matched whole: what a detector's analyze_string yields is the pattern's group where it has
        # one (GitHubTokenDetector's is the prefix, ghp, alone).
        whole = _REDACTED_WHOLE.get(rule.secret_type)
        for pattern in rule.denylist if whole is None else (_pattern(whole),):
            text = pattern.sub(functools.partial(_labelled, rule), text)
    return text


# Each pattern compiled at its first use, and kept: re's own cache drops its oldest entry once a process has compiled
# 512 patterns (a long one, a test session), and these are used for every file and name a scan reads.
_compiled = functools.cache(re.compile)


class _Pattern(NamedTuple):
    """A rule's pattern, searched with (compiled at its first use) only in a text that has what each match
    needs: as many characters as its shortest match (``width``) and the characters every match holds in a row
    (``run``). envkit.yaml's values are mostly shorter than a token, or lack its prefix: compiling some fifty
    patterns was most of the time a new envkit.yaml's check took (issue 42)."""

    text: str
    flags: int
    width: int
    run: str | None

    def finditer(self, text: str) -> Iterator[re.Match]:
        return _compiled(self.text, self.flags).finditer(text) if self.may_match(text) else iter(())

    def search(self, text: str) -> re.Match | None:
        return _compiled(self.text, self.flags).search(text) if self.may_match(text) else None

    def sub(self, replace: Callable[[re.Match], str], text: str) -> str:
        return _compiled(self.text, self.flags).sub(replace, text) if self.may_match(text) else text

    def may_match(self, text: str) -> bool:
        return len(text) >= self.width and (self.run is None or self.run in text)


@functools.cache
def _pattern(text: str, flags: int = 0) -> _Pattern:
    """``text`` as a _Pattern, what its matches need from the table generated ahead of time (envkit.project.detectors'
    NEEDS); nothing, searched in every text, where it is not there."""
    from envkit.project import detectors

    return _Pattern(text, flags, *detectors.NEEDS.get((text, flags), (0, None)))


class _Rule(NamedTuple):
    """One of envkit's content rules, shaped as a detect-secrets detector is, so that both are matched alike."""

    secret_type: str
    denylist: tuple[_Pattern, ...]

    def analyze_string(self, string: str) -> Iterator[str]:
        yield string  # the pattern's match is the token


@functools.cache
def _own_rules() -> tuple[_Rule, ...]:
    # compiled when first matched, not at import: a render whose config's clean verdict is kept matches none
    return tuple(_Rule(what, (_pattern(pattern.decode()),)) for what, pattern in SECRET_CONTENT)


def _first(rules: tuple[_Rule, ...], text: str) -> _Rule | None:
    """The first of ``rules`` that finds a token in ``text``, or None. One loop, each pattern's may_match written
    out: a new envkit.yaml's hundred strings, each against some fifty patterns, took twice as long through a
    generator and two calls per pattern (issue 42)."""
    length = len(text)
    for rule in rules:
        for pattern in rule.denylist:
            if length < pattern.width or (pattern.run is not None and pattern.run not in text):
                continue
            for found in _compiled(pattern.text, pattern.flags).finditer(text):
                if _accepted(rule, found):
                    return rule
    return None


def _accepted(rule, found: re.Match) -> bool:
    """Whether a rule's match is a token: it begins a word (``_WORD_CHARACTERS``), and the rule accepts it
    (JwtTokenDetector decodes its JSON)."""
    token, start = found.group(), found.start()
    alone = token[:1] not in _WORD_CHARACTERS or start == 0 or found.string[start - 1] not in _WORD_CHARACTERS
    return alone and next(rule.analyze_string(token), None) is not None


def _labelled(rule, found: re.Match) -> str:
    """The match with the token replaced by what it is; the space, quote, : or :// that some rules match around it
    stays."""
    token = found.group()
    if not _accepted(rule, found):
        return token
    return token.replace(token.strip(" \t\r\n\"':/"), _label(rule.secret_type))


def _label(what: str) -> str:
    """What stands for a secret where it is left out: what it is (``holds a Hugging Face token`` or its type)."""
    return f"[{what.removeprefix('holds ')}, redacted]"


def _windowed(text: str) -> str:
    """``text`` with each line over ``_LINE`` characters cut into windows of ``_LINE``, each the next's start."""
    if len(text) <= _LINE:
        return text
    step = _LINE - SCAN_OVERLAP
    lines = (
        [line] if len(line) <= _LINE else [line[index : index + _LINE] for index in range(0, len(line), step)]
        for line in text.split("\n")
    )
    return "\n".join(window for windows in lines for window in windows)


@functools.cache
def _detectors() -> tuple:
    """detect-secrets' regex detectors, less ``_UNUSED_DETECTORS``, by class name; none, said once on stderr,
    where the package is not installed (a notebook's kernel, whose report redacts with envkit's rules alone).
    Where the version envkit/project/detectors.py was generated from is installed, its patterns stand in for
    them, and detect-secrets (requests with it: most of a render's time) is imported only when one matches."""
    from envkit.project import detectors  # generated from the detectors below (scripts/generate_validators.py)

    if not shipped_release_installed():
        # Another release's patterns as _Shipped rules: each searched only in a text that has what its matches need
        # where it is one of the shipped patterns (NEEDS, by its text), in every text otherwise; its detector decides
        # whether a match is a token. None, said once, where detect-secrets is not installed.
        return tuple(
            _Shipped(
                detector.secret_type, tuple(_pattern(pattern.pattern, pattern.flags) for pattern in detector.denylist)
            )
            for detector in imported_detectors().values()
        )
    return tuple(
        _Shipped(secret_type, tuple(_pattern(text, flags) for text, flags in patterns))
        for secret_type, patterns in detectors.DETECTORS
    )


@functools.cache
def imported_detectors() -> dict:
    """detect-secrets' detectors that ``_detectors`` stands for, by secret type, imported."""
    try:
        from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
        from detect_secrets.plugins.base import RegexBasedDetector
    except ImportError:
        print(
            "envkit: detect-secrets is not installed in this Python, so secrets are found by envkit's own rules "
            "alone, which miss AWS, GitHub (ghp_), GitLab, Slack, Stripe and Azure keys among others "
            "(docs/secrets.md): pip install detect-secrets",
            file=sys.stderr,
        )
        return {}
    classes = sorted(get_mapping_from_secret_type_to_class().values(), key=lambda cls: cls.__name__)
    return {
        cls.secret_type: cls()
        for cls in classes
        if issubclass(cls, RegexBasedDetector) and cls.__name__ not in _UNUSED_DETECTORS
    }


class _Shipped(_Rule):
    """A detector as envkit/project/detectors.py holds it: its patterns search; detect-secrets' own detector,
    imported then, decides whether a match is a token."""

    def analyze_string(self, string: str) -> Iterator[str]:
        detector = imported_detectors().get(self.secret_type)
        return iter(()) if detector is None else detector.analyze_string(string)


# A URL's credentials that the content rules leave to its scheme: a user alone before an http(s) host (an index's
# token: https://TOKEN@host/simple), a password of any length (postgresql://admin:pw@db) and a query parameter
# named for a credential (?token=..., X-Amz-Signature=...). A placeholder (${TOKEN}, <token>) is none.
_URL_CREDENTIALS = (
    ("a token as a URL's user", r"(?i:\bhttps?)://(?![$<{])[^\s/?#@'\"<>`:]+@"),
    ("a password in a URL", r"(?i:\b[a-z][a-z0-9+.-]{1,20})://[^\s:/?#@'\"<>`]+:(?![$<{*])[^\s/?#@'\"<>`]+@"),
    (
        "a token in a URL's query",
        r"(?i)\b[a-z][a-z0-9+.-]{1,20}://[^\s?#]*\?(?:[^\s#]*&)?(?:[a-z0-9]+[_-])*"
        r"(?:token|key|apikey|secret|password|passwd|pwd|signature|sig|credentials?)=(?![$<{])[^\s&#]",
    ),
)
# A mapping key that names a secret (HF_TOKEN, WANDB_API_KEY, DB_PASSWORD): its value is one, whatever its form.
_SECRET_KEY = r"(?i)(?:^|[_.-])(?:token|secret|password|passwd|api[_-]?key|access[_-]?key|private[_-]?key)$"
# A shorter value, or a reference (${HF_TOKEN}), is a setting or a placeholder, not a secret.
_SECRET_VALUE_MIN = 8


def in_url(text: str) -> str | None:
    """What credentials a URL in ``text`` carries beyond the content rules' (a token as its user, a password of any
    length, a token in its query), or None: an index URL, a database URL, a signed link."""
    return next((f"holds {what}" for what, pattern in _URL_CREDENTIALS if _pattern(pattern).search(text)), None)


def in_values(values, at: str = "") -> tuple[str, str] | None:
    """The first string of ``values`` (a loaded YAML document: mappings, lists, scalars) that holds a secret, as
    its key path (``targets/cpu/env/HF_TOKEN``) and what it holds; else None. Every string leaf and key is read
    alike, so that no field of envkit.yaml that reaches a Dockerfile, a notebook, a launch file or a record is
    left out because nobody listed it."""
    return next(((where, why) for where, _, why in _held(values, at)), None)


def concealed(line: str, values) -> str:
    """``line``, an error line about ``values`` (a loaded YAML document or a part of it), with every string of
    ``values`` that holds a secret (``in_values``' rules) replaced by what it holds, however the line quotes it
    (as it is, as Python's repr, as JSON): a value the schema rejects is quoted before the secret check runs."""
    held = {text: why for _, text, why in _held(values)}
    for text in sorted(held, key=len, reverse=True):  # a string inside another is replaced after it
        for form in sorted({text, repr(text)[1:-1], json.dumps(text)[1:-1]}, key=len, reverse=True):
            line = line.replace(form, _label(held[text]))
    return line


def _held(values, at: str = "") -> Iterator[tuple[str, str, str]]:
    """Each string of ``values`` (keys included) that holds a secret: its key path, the string, what it holds."""
    if isinstance(values, str):
        why = by_content(values.encode("utf-8", "surrogateescape")) or in_url(values)
        if why is not None:
            yield at, values, why
        return
    children = values.items() if isinstance(values, dict) else enumerate(values) if isinstance(values, list) else ()
    for key, value in children:
        where = f"{at}/{key}" if at else str(key)
        if isinstance(key, str):
            # the path names a key that is itself a secret by what it holds, never by the key
            held = next(_held(key), None)
            if held is not None:
                where = f"{at}/{_label(held[2])}" if at else _label(held[2])
                yield where, key, held[2]
        yield from _held(value, where)
        named = isinstance(key, str) and _compiled(_SECRET_KEY).search(key) and isinstance(value, str)
        if named and len(value) >= _SECRET_VALUE_MIN and not value.startswith("$"):
            yield where, value, f"holds a value its name ({key}) says is a secret"
