"""Files that look like secrets, by name or by content: kept out of images and notebooks unless listed.

An image is pushed and a notebook is committed or shared: either publishes every file it holds. A file
whose name says it holds credentials (``.env``, ``id_rsa``, ``.netrc``, ``*.pem``...) or whose bytes hold
a private key or a token with a well-known prefix is left out, and the caller names it in one line; the
project's ``include_secrets`` list in envkit.yaml is the only way in (docs/secrets.md says why these lists).

The names are the union of what ``docker init`` writes into a new .dockerignore (``.env`` and a
development secrets YAML file) and the credential files gitleaks' and GitHub's secret scanning look for; the contents
are gitleaks' and detect-secrets' private-key and token-prefix rules, only those with a fixed prefix (a
32-hex string may be a hash as easily as a key; guessing from entropy would leave out ordinary files).
"""

from __future__ import annotations

import base64
import fnmatch
import re
from pathlib import PurePosixPath

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
    ".netrc",
    "_netrc",
    ".git-credentials",
    ".pgpass",
    ".htpasswd",
    ".npmrc",
    ".pypirc",
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
    ".s3cfg",
    ".boto",
    ".dockercfg",
)
SECRET_FOLDERS = (".aws", ".azure", ".ssh", ".gnupg", ".docker", ".kube", ".kaggle", ".huggingface", "secrets")

# A private key's header (PEM, OpenSSH, PGP, PuTTY) or a token whose prefix its issuer fixed: few false alarms.
SECRET_CONTENT = (
    ("a private key", rb"-----BEGIN[ A-Z0-9_-]{0,100}PRIVATE KEY(?: BLOCK)?-----|PuTTY-User-Key-File-\d"),
    ("an AWS access key", rb"\b(?:AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16}\b"),
    ("a GitHub token", rb"\b(?:gh[pousr]_[0-9A-Za-z]{36}|github_pat_[0-9A-Za-z_]{82})\b"),
    ("a GitLab token", rb"\bglpat-[0-9A-Za-z_-]{20}\b"),
    ("a Slack token", rb"\bxox[abprs]-[0-9A-Za-z-]{10,}"),
    ("a Hugging Face token", rb"\bhf_[A-Za-z]{34}\b"),
    ("an OpenAI key", rb"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}T3BlbkFJ[A-Za-z0-9_-]{20,}"),
    ("an Anthropic key", rb"\bsk-ant-(?:api|admin)\d\d-[A-Za-z0-9_-]{80,}"),
    ("a Google API key", rb"\bAIza[0-9A-Za-z_-]{35}\b"),
    ("a Stripe key", rb"\b[rs]k_live_[0-9A-Za-z]{24,}"),
    ("an npm token", rb"\bnpm_[A-Za-z0-9]{36}\b"),
    ("a package index upload token", rb"\bpypi-AgE[A-Za-z0-9_-]{50,}"),
    # detect-secrets' basic-auth rule: a URL's user and password before its host (a placeholder for the password,
    # a shell variable or one in angle brackets, is none)
    ("a password in a URL", rb"(?i:\b[a-z][a-z0-9+.-]{1,20})://[^\s:/?#@'\"<>`]+:[^\s/?#@'\"<>`${}*]{3,}@"),
)
_CONTENT = re.compile(b"|".join(b"(" + pattern + b")" for _, pattern in SECRET_CONTENT))
_PRIVATE_KEY = re.compile(SECRET_CONTENT[0][1])
# "-----BEGIN " in base64 begins a PEM block stored encoded, as a kubeconfig's client-key-data and a Kubernetes
# Secret's tls.key are: its first 90 bytes decoded hold the header.
_BASE64_PEM = re.compile(rb"LS0tLS1CRUdJTi[A-Za-z0-9+/]{8,106}")


def by_name(path: str) -> str | None:
    """Why the relative POSIX ``path`` looks like a secret by its name (the pattern), or None. Case is ignored,
    as gitleaks' path rules ignore it: ``.ENV`` and ``Server.PEM`` hold what ``.env`` and ``server.pem`` do."""
    parts = PurePosixPath(path).parts
    for folder in parts[:-1]:
        if folder.lower() in SECRET_FOLDERS:
            return f"under {folder}/"
    name = parts[-1].lower()
    return next((f"named {pattern}" for pattern in SECRET_NAMES if fnmatch.fnmatchcase(name, pattern)), None)


def by_content(data: bytes) -> str | None:
    """What secret ``data`` holds (a private key, a GitHub token...), or None."""
    found = _CONTENT.search(data)
    if found is not None:
        return f"holds {SECRET_CONTENT[found.lastindex - 1][0]}"
    for encoded in _BASE64_PEM.finditer(data):
        text = encoded.group()
        if _PRIVATE_KEY.search(base64.b64decode(text[: len(text) // 4 * 4])):
            return f"holds {SECRET_CONTENT[0][0]} (base64)"
    return None


def redacted(text: str) -> str:
    """``text`` with each secret the content rules find replaced by what it is: for what envkit publishes besides
    files (a report's arguments and a failed run's stderr, which a program may have printed a token into)."""

    def what(found: re.Match) -> bytes:
        return f"[{SECRET_CONTENT[found.lastindex - 1][0]}, redacted]".encode()

    return _CONTENT.sub(what, text.encode("utf-8", "surrogatepass")).decode("utf-8", "surrogatepass")


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
_SECRET_KEY = re.compile(r"(?i)(?:^|[_.-])(?:token|secret|password|passwd|api[_-]?key|access[_-]?key|private[_-]?key)$")
# A shorter value, or a reference (${HF_TOKEN}), is a setting or a placeholder, not a secret.
_SECRET_VALUE_MIN = 8


def in_url(text: str) -> str | None:
    """What credentials a URL in ``text`` carries beyond the content rules' (a token as its user, a password of any
    length, a token in its query), or None: an index URL, a database URL, a signed link."""
    return next((f"holds {what}" for what, pattern in _URL_CREDENTIALS if re.search(pattern, text)), None)


def in_values(values, at: str = "") -> tuple[str, str] | None:
    """The first string of ``values`` (a loaded YAML document: mappings, lists, scalars) that holds a secret, as
    its key path (``targets/cpu/env/HF_TOKEN``) and what it holds; else None. Every string leaf and key is read
    alike, so that no field of envkit.yaml that reaches a Dockerfile, a notebook, a launch file or a record is
    left out because nobody listed it."""
    if isinstance(values, str):
        why = by_content(values.encode("utf-8", "surrogateescape")) or in_url(values)
        return None if why is None else (at, why)
    children = values.items() if isinstance(values, dict) else enumerate(values) if isinstance(values, list) else ()
    for key, value in children:
        where = f"{at}/{key}" if at else str(key)
        found = (in_values(key, where) if isinstance(key, str) else None) or in_values(value, where)
        if found is not None:
            return found
        named = isinstance(key, str) and _SECRET_KEY.search(key) and isinstance(value, str)
        if named and len(value) >= _SECRET_VALUE_MIN and not value.startswith("$"):
            return where, f"holds a value its name ({key}) says is a secret"
    return None
