"""The project's files that an image holds and a notebook carries: what git tracks, less what the
project's ``.dockerignore`` excludes and what looks like a secret, under a size limit.

git's list, not the folder: a data set, checkpoints or a venv beside the code never enter an image
or a notebook, whether or not the user remembered to ignore them. ``.dockerignore`` is read with the
Docker SDK's own matcher (Docker's rules: ``**``, ``!`` exceptions, a folder excludes what it holds).
A folder that is not a git work tree is handled, not refused: every file under it that its
``.gitignore`` files do not exclude (git itself lists them, so they are honoured as git would) and
``.dockerignore`` does not exclude, and the caller says so.
A file that looks like a secret (envkit.project.secrets) is left out unless envkit.yaml's
``include_secrets`` lists it, and named in one line on stderr.
"""

import os
import sys
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, NamedTuple

from envkit.errors import EnvkitError
from envkit.project import secret_verdicts
from envkit.project.marks import written_by_envkit
from envkit.project.output import DEFAULT_OUTPUT, Output
from envkit.support.bounded_load import Refused, load_text, note, open_regular, volatile

if TYPE_CHECKING:
    import subprocess

IGNORE_FILE = ".dockerignore"
DEFAULT_LIMIT_MB = 100
# Named in the refusal: enough to find the culprit, few enough for one line.
LARGEST_NAMED = 3
# In a folder git does not track, also the runs' data and results (run.sh's defaults), the venvs, the caches
# (make's render stamp in .cache/ among them) and editors' folders, which a repository's .gitignore keeps out:
# else every run would change the next image. gitignore's syntax: git lists the folder's files.
UNTRACKED_OUTPUT = (
    "/results/",
    "/data/",
    "/.venv*/",
    ".git/",
    ".cache/",
    ".*_cache/",
    ".ipynb_checkpoints/",
    "/.idea/",
    "/.vscode/",
    "__pycache__/",
    "*.pyc",
)


class ProjectFiles(NamedTuple):
    """The project's files an image or a notebook holds: their paths and sizes, and what was left out."""

    root: Path
    paths: tuple[str, ...]  # relative, POSIX, sorted
    sizes: tuple[int, ...]
    tracked: bool  # git's list (True), or every file of a folder that is not a git work tree
    secrets: tuple[tuple[str, str], ...] = ()  # (path, why it looks like one) of each secret left out
    submodules: tuple[str, ...] = ()  # git submodules under the root: their files are not the project's list
    undecodable: tuple[str, ...] = ()  # names that are not UTF-8 (as the bytes they are, escaped), left out

    @property
    def total(self) -> int:
        return sum(self.sizes)

    def source(self) -> str:
        """Where the list came from, for the line that reports it."""
        if self.tracked:
            return f"the files git tracks in {self.root}"
        return (
            f"every file under {self.root} that its .gitignore files do not exclude ({self.root} is not a git "
            "work tree, so there is no tracked list)"
        )

    def notes(self) -> list[str]:
        """What the caller says on stderr about files left out: one line each for the secrets, the submodules
        and the names that are not UTF-8."""
        notes = []
        if self.secrets:
            named = ", ".join(f"{path} ({why})" for path, why in self.secrets)
            notes.append(
                f"envkit: left out {len(self.secrets)} file(s) that look like secrets, so no image or notebook "
                f"publishes them: {named}; list one under include_secrets in envkit.yaml to carry it, or in "
                f"{IGNORE_FILE} to leave it out without this line"
            )
        if self.submodules:
            notes.append(
                f"envkit: left out the git submodule(s) {', '.join(self.submodules)}: git tracks a submodule as a "
                "commit, not as files, so no image or notebook holds them; install it as a package or copy its "
                "files into the project"
            )
        if self.undecodable:
            notes.append(
                f"envkit: left out {len(self.undecodable)} file(s) whose names are not UTF-8, which a notebook's "
                f"archive and envkit's records cannot hold: {', '.join(self.undecodable)}; rename them"
            )
        return notes

    def require(self, name: str) -> None:
        """One line when the project file ``name`` (relative, POSIX) is not among these files: what runs must be."""
        if name in self.paths:
            return
        secret = dict(self.secrets).get(name)
        if secret is not None:
            raise EnvkitError(
                f"{name} looks like a secret ({secret}), so no image or notebook of the project holds it: list it "
                "under include_secrets in envkit.yaml if it is not one"
            )
        module = next((module for module in self.submodules if name.startswith(f"{module}/")), None)
        if module is not None:
            raise EnvkitError(
                f"{name} is inside the git submodule {module}, whose files no image or notebook holds (git tracks "
                "a submodule as a commit): copy it into the project, or install the submodule as a package"
            )
        fix = "track it with git (git add, then commit)" if self.tracked else "take it out of .gitignore"
        raise EnvkitError(
            f"{name} is not among {self.source()} less {IGNORE_FILE}'s, so no image or notebook of the project "
            f"holds it: {fix} and keep it out of {IGNORE_FILE}, then try again"
        )

    def require_program(self, program) -> None:
        """``require`` the script a command runs: the first word of its argv that names a file of the project
        (python train.py: train.py; ./run.sh), not the files its arguments name (data is read from elsewhere)."""
        for word in program:
            path = PurePosixPath(word)
            if word.startswith("-") or path.is_absolute() or ".." in path.parts:
                continue
            if (self.root / path).is_file() and not (self.root / path).is_symlink():
                self.require(path.as_posix())
                return


def _megabytes(size: int) -> str:
    return f"{size / 1e6:.1f} MB"


def _ignore_patterns(root: Path) -> list[str]:
    path = root / IGNORE_FILE
    note(path)  # absent is a state too: one appearing changes the list (envkit.render.memo)
    if not path.is_file():
        return []
    lines = (line.strip() for line in load_text(path).splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def _git(root: Path, *argv: str, git_dir: str | None = None) -> "subprocess.CompletedProcess":
    """git's answer in ``root`` (bytes), or one line when git is not installed."""
    import subprocess  # here, not above: a render reads envkit.yaml through this module and lists no files

    where = [f"--git-dir={git_dir}", f"--work-tree={root}"] if git_dir else ["-C", str(root)]
    try:
        return subprocess.run(["git", *where, *argv], capture_output=True, check=False)
    except OSError:
        raise EnvkitError(
            "git is not installed: envkit lists a project's files with it (the files git tracks, or outside a "
            "work tree the files .gitignore does not exclude); install git"
        ) from None


def in_work_tree(root: Path) -> bool:
    """Whether ``root`` is in a git work tree (its own or a parent's); False where git is not installed."""
    import subprocess

    try:
        inside = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--is-inside-work-tree"], capture_output=True, text=True, check=False
        )
    except OSError:
        return False
    return inside.stdout.strip() == "true"


def git_index(root: Path) -> Path | None:
    """The index of the work tree ``root`` is in (it changes when a file is tracked or untracked), if any."""
    import subprocess

    if not in_work_tree(root):
        return None
    found = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "--path-format=absolute", "--git-path", "index"],
        capture_output=True,
        text=True,
        check=False,
    )
    return Path(found.stdout.strip()) if found.returncode == 0 and found.stdout.strip() else None


def _names(listed: "subprocess.CompletedProcess", root: Path) -> list[str]:
    if listed.returncode != 0:
        raise EnvkitError(f"git ls-files in {root} failed: {listed.stderr.decode(errors='replace').strip()}")
    # fsdecode: a file name that is not UTF-8 keeps its bytes (as surrogates) until it is named or left out.
    return [os.fsdecode(name) for name in listed.stdout.split(b"\0") if name]


GITLINK = "160000"  # the mode git gives a submodule's entry: a commit, not a file


def _tracked(root: Path) -> tuple[list[str], list[str]] | None:
    """git's tracked paths under ``root`` (relative to it) and its submodules, or None when ``root`` is in no
    work tree."""
    if not in_work_tree(root):
        return None
    index = git_index(root)
    if index is not None:
        note(index)  # what git ls-files answers from: a file tracked or untracked since is a change
    # --stage: "<mode> <object> <stage>\t<path>" per entry, so a submodule is told by its mode.
    entries = _names(_git(root, "ls-files", "-z", "--stage", "--full-name", "--", "."), root)
    top = os.fsdecode(_git(root, "rev-parse", "--show-toplevel").stdout.strip())
    prefix = root.resolve().relative_to(Path(top).resolve())
    files, submodules = [], []
    for entry in entries:
        info, name = entry.split("\t", 1)
        name = Path(name).relative_to(prefix).as_posix() if prefix != Path(".") else name
        (submodules if info.split(" ", 1)[0] == GITLINK else files).append(name)
    return sorted(set(files)), submodules  # set: a file in conflict has an entry per stage


def _escaped(name: str) -> str:
    """A name that is not UTF-8 as one line can show it: its bytes, the others as backslash escapes."""
    return os.fsencode(name).decode("utf-8", "backslashreplace")


def _unignored(root: Path) -> list[str]:
    """Every file under ``root`` (not a work tree) that its .gitignore files and UNTRACKED_OUTPUT leave in: git
    lists them from a scratch repository whose work tree is ``root``, so ignoring is git's own. The whole folder
    is read: a render that reads it is not remembered."""
    import tempfile

    volatile()
    with tempfile.TemporaryDirectory(prefix="envkit-files-") as scratch:
        _git(root, "init", "-q", "--bare", scratch)
        excluded = [f"--exclude={pattern}" for pattern in UNTRACKED_OUTPUT]
        listed = _git(root, "ls-files", "-z", "--others", "--exclude-standard", *excluded, git_dir=scratch)
    # A folder that is a repository of its own is listed as "name/": it is not this project's files.
    return [name for name in _names(listed, root) if not name.endswith("/")]


def _is_utf8(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:  # a surrogate from fsdecode: the name's bytes are not UTF-8
        return False
    return True


def _listed(include: tuple[str, ...], name: str) -> bool:
    """Whether envkit.yaml's include_secrets lists ``name``: the file itself, or a folder holding it."""
    return any(name == entry or name.startswith(entry.rstrip("/") + "/") for entry in include)


def refuse_secret_values(path: Path, root: Path, values, include_secrets: tuple[str, ...]) -> None:
    """One line where a string of ``path`` (envkit.yaml, or the experiments file it names, in the project at
    ``root``), loaded as ``values``, holds a secret (envkit.project.secrets.in_values), naming its key path, never
    the value: any value of it may become a Dockerfile's ENV or ARG, a notebook's settings, a launch file's line or
    a run's argv in its record, each published. Listing the file under include_secrets is the one way in."""
    name = path.resolve().relative_to(root.resolve()).as_posix()
    found = None if _listed(include_secrets, name) else secret_verdicts.in_values_once(values, _secret_in_values)
    if found is not None:
        raise EnvkitError(
            f"{path}: {found[0]} {found[1]}, which envkit would publish (a Dockerfile, an image, a notebook, a "
            f"launch file, a run's record): give it at run time instead (the environment, `envkit launch --env`, a "
            f"notebook platform's secrets), or list {name} under include_secrets to publish it all the same"
        )


def _secret_in_values(values) -> tuple[str, str] | None:
    """envkit.project.secrets.in_values, imported only where envkit.yaml's clean verdict is not kept."""
    from envkit.project import secrets

    return secrets.in_values(values)


def _in_content(path: Path) -> str | None:
    """What secret the file's bytes hold, or an archive's members (envkit.project.archives); None when none."""
    from envkit.project import secrets  # where files are read: a render reads envkit.yaml through this module
    from envkit.project.archives import in_archive  # tarfile, zipfile and lzma: only where files are read

    try:
        with open_regular(path) as stream:
            return secrets.in_stream(stream) or in_archive(path.name, stream)
    except (OSError, Refused) as exc:
        why = exc.reason if isinstance(exc, Refused) else exc.strerror or exc
        raise EnvkitError(
            f"cannot read {path} to see whether it holds a secret: {why}; make it readable or list it in {IGNORE_FILE}"
        ) from None


def _refuse_over_limit(root: Path, kept: list[tuple[str, int]], tracked: bool, limit_mb: int) -> None:
    total = sum(size for _, size in kept)
    if total <= limit_mb * 1_000_000:
        return
    largest = sorted(((size, name) for name, size in kept), reverse=True)[:LARGEST_NAMED]
    named = ", ".join(f"{name} ({_megabytes(size)})" for size, name in largest)
    raise EnvkitError(
        f"{ProjectFiles(root, (), (), tracked).source()} come to {_megabytes(total)}, over the {limit_mb} MB limit "
        f"for an image or a notebook; the largest: {named}. List data in {IGNORE_FILE} (experiments read it from "
        f"ENVKIT_DATA_DIR), or raise files_limit_mb in envkit.yaml"
    )


def files_of(config, *, quiet: bool = False) -> ProjectFiles:
    """The files of a loaded project (envkit.project.config.ProjectConfig), with its limit and its listed secrets."""
    return project_files(config.root, config.files_limit_mb, config.include_secrets, config.output, quiet=quiet)


def project_files(
    root: Path,
    limit_mb: int = DEFAULT_LIMIT_MB,
    include_secrets: tuple[str, ...] = (),
    output: Output = DEFAULT_OUTPUT,
    *,
    quiet: bool = False,
) -> ProjectFiles:
    """The project's files, or one line naming the largest when together they pass ``limit_mb``; what looks like
    a secret and ``include_secrets`` does not list is left out and (unless ``quiet``) named on stderr."""
    root = Path(root).resolve()
    tracked = _tracked(root)
    listed, submodules = tracked if tracked is not None else (_unignored(root), [])
    undecodable = [name for name in listed if not _is_utf8(name)]
    from envkit.project import secrets
    from envkit.support.docker_client import docker_sdk

    matcher = docker_sdk().utils.build.PatternMatcher(_ignore_patterns(root))
    # What envkit writes in a project is never its files: render's output (the image folder, staged into an
    # image beside the project's files; the notebook folder, whose committed notebooks cannot carry themselves),
    # made from envkit.yaml, and the locks and push records beside it. Only what carries envkit's mark
    # (envkit.project.marks): a file of the user's in these folders (notebooks/helpers.py) is the project's.
    envkit_output = tuple(f"{top}/" for top in output.tops())
    names = sorted(
        name
        for name in listed
        if _is_utf8(name)
        and not matcher.matches(name)
        and not (name.startswith(envkit_output) and written_by_envkit(root / name))
    )
    kept, left_out = [], []
    for name in names:
        path = root / name
        note(path)  # a tracked file deleted, or restored, changes the list
        # A deleted tracked file is not in the tree; a symlink or a submodule is not a file the image can hold.
        if path.is_symlink() or not path.is_file():
            continue
        why = None if _listed(include_secrets, name) else secrets.by_name(name)
        if why is None:
            kept.append((name, os.stat(path).st_size))
        else:
            left_out.append((name, why))
    _refuse_over_limit(root, kept, tracked is not None, limit_mb)
    # By content after the size check: a file too large is refused before it is read whole.
    found = {name: None if _listed(include_secrets, name) else _in_content(root / name) for name, _ in kept}
    left_out += [(name, why) for name, why in found.items() if why is not None]
    kept = [(name, size) for name, size in kept if found[name] is None]
    files = ProjectFiles(
        root,
        tuple(name for name, _ in kept),
        tuple(size for _, size in kept),
        tracked is not None,
        tuple(sorted(left_out)),
        tuple(submodules),
        tuple(sorted(_escaped(name) for name in undecodable)),
    )
    if not quiet:
        for line in files.notes():
            print(line, file=sys.stderr)
    return files
