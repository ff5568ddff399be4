"""`envkit venv` and `python -m envkit.host.venv`: a lock as a host virtual environment, hash-checked.

The install tests serve two small wheels of made-up projects (envkit-probe-*, built by
tests/wheel_index.py) on 127.0.0.1 and lock them by hand, so they need no network.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from paths import REPO_ROOT
from wheel_index import IndexServer

from envkit.cli import main
from envkit.host.venv import MARKER
from envkit.host.venv import main as venv_main
from envkit.project import marks

THIS_PYTHON = "{}.{}".format(*sys.version_info[:2])


def lock_text(python: str, pins: dict[str, str]) -> str:
    """An envkit lock as `envkit lock` writes one: the header lines envkit reads, then hashed pins."""
    lines = [
        "# envkit lock for probe.in: every package pinned by version and sha256.",
        "# inputs-sha256: " + "0" * 64,
        f"# platform: x86_64-manylinux_2_36, python {python}",
    ]
    for requirement, sha in pins.items():
        lines += [f"{requirement} \\", f"    --hash=sha256:{sha}"]
    return "\n".join(lines) + "\n"


def envkit(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def bootstrap(capsys, *argv: str) -> tuple[int, str, str]:
    """`python -m envkit.host.venv LOCK --path DIR`, what make venv runs."""
    code = venv_main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_a_lock_for_a_python_this_host_lacks_is_one_line_and_writes_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("UV_OFFLINE", "1")  # uv may not download one: its refusal joins the line
    lock = tmp_path / "probe.lock"
    lock.write_text(lock_text("3.9", {"envkit-probe-a==1.0": "a" * 64}))
    code, out, err = bootstrap(capsys, str(lock), "--path", str(tmp_path / "venv"))
    assert (code, out) == (2, "")
    [line] = err.splitlines()
    assert line.startswith(f"envkit: error: the lock needs Python 3.9; found {sys.executable} {sys.version.split()[0]}")
    assert "`uv python install 3.9` failed: " in line
    assert line.endswith(": install one (python3.9 on PATH) or pass --python PATH")
    assert not (tmp_path / "venv").exists()


def fake_tool(path: Path, script: str) -> str:
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(0o755)
    return str(path)


def test_without_an_allowed_python_on_path_uv_installs_one(tmp_path, monkeypatch):
    """The last resort before refusing: `uv python install` (which honours UV_PYTHON_INSTALL_MIRROR), then
    `uv python find` names the interpreter it installed."""
    import envkit.host.venv as host_venv

    python = fake_tool(tmp_path / "python3.9", "echo 3.9.25\n")
    log = tmp_path / "uv.log"
    uv = fake_tool(tmp_path / "uv", f'echo "$@" >> {log}\n[ "$2" = find ] && echo {python}\nexit 0\n')
    monkeypatch.setattr(host_venv, "find_uv", lambda: uv)
    monkeypatch.setenv("PATH", "/nonexistent")
    assert host_venv.find_python(("3.9",)) == (python, "3.9.25")
    assert log.read_text() == "python install 3.9\npython find 3.9\n"


def test_without_uv_or_a_supported_python_the_line_says_how_to_get_one(tmp_path, capsys, monkeypatch):
    """Debian 13 later with 3.14 alone, or an older host with 3.10: no uv to install one, so the line says how to
    get a supported Python, not only that uv is missing."""
    import envkit.host.venv as host_venv

    monkeypatch.setattr(host_venv, "find_uv", lambda: None)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake_tool(bin_dir / "python3", "echo 3.14.2\n")
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setattr(sys, "executable", fake_tool(tmp_path / "python3.10", "echo 3.10.16\n"))
    lock = tmp_path / "probe.lock"
    lock.write_text(lock_text("3.13", {"envkit-probe-a==1.0": "a" * 64}))
    code, out, err = bootstrap(capsys, str(lock), "--path", str(tmp_path / "venv"))
    assert (code, out) == (2, "")
    assert err == (
        f"envkit: error: the lock needs Python 3.13; found {tmp_path / 'python3.10'} 3.10.16, python3 3.14.2 "
        f"({bin_dir / 'python3'}), and no uv here to install "
        "one: install python3.13 with the system's packages (where they have it), or uv (its standalone installer, "
        "or pipx install uv) and run this again, which then runs `uv python install 3.13`; or pass --python PATH\n"
    )
    assert not (tmp_path / "venv").exists()


# What each installer prints where a proxy re-signs TLS with a CA the host does not trust.
PIP_UNTRUSTED = (
    "WARNING: Retrying (Retry(total=0, connect=None, read=None, redirect=None, status=None)) after connection broken "
    "by 'SSLError(SSLCertVerificationError(1, '[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: unable to "
    "get local issuer certificate (_ssl.c:1006)'))': /simple/uv/\n"
    "ERROR: Could not find a version that satisfies the requirement uv==0.13.9 (from versions: none)\n"
    "ERROR: No matching distribution found for uv==0.13.9\n"
)
UV_UNTRUSTED = (
    "error: Request failed after 1 retry\n  Caused by: Failed to fetch: `https://index.example/simple/numpy/`\n"
    "  Caused by: client error (Connect)\n  Caused by: invalid peer certificate: UnknownIssuer\n"
)


@pytest.mark.parametrize(
    "installer, stderr, cause",
    [
        ("pip", PIP_UNTRUSTED, "certificate verify failed: unable to get local issuer certificate"),
        ("uv", UV_UNTRUSTED, "invalid peer certificate: UnknownIssuer"),
    ],
)
def test_an_untrusted_certificate_says_so_and_how_to_trust_the_ca(
    tmp_path, capsys, monkeypatch, installer, stderr, cause
):
    """pip said only "no versions of uv==0.13.9" and uv "UnknownIssuer"; the line names the cause and the fix."""
    import envkit.host.venv as host_venv

    tool = fake_tool(tmp_path / "installer", f"cat >&2 <<'EOF'\n{stderr}EOF\nexit 1\n")
    with pytest.raises(host_venv.EnvkitError) as refused:
        host_venv._run([tool], f"{installer} install")
    assert str(refused.value) == (
        f"{installer} install failed: the index's TLS certificate is not trusted here ({cause}): on a network that "
        "re-signs TLS, add its CA to the system's store (update-ca-certificates), then set UV_NATIVE_TLS=1 (uv) and "
        "PIP_CERT=/etc/ssl/certs/ca-certificates.crt (pip), or point SSL_CERT_FILE (uv) and PIP_CERT (pip) at a bundle "
        "that holds it"
    )


def universal_lock(wheels: dict[tuple[str, str], str]) -> str:
    """A host lock's header as `envkit lock --requirements` writes it: universal, with its coverage lines."""
    text = lock_text("3.11 3.12 3.13", {"envkit-probe-a==1.0": "a" * 64})
    cells = "".join(f"# wheels: {where} python {python}: {verdict}\n" for (where, python), verdict in wheels.items())
    return text.replace("x86_64-manylinux_2_36", "universal: linux/amd64 linux/arm64").replace(
        "python 3.11 3.12 3.13\n", "python 3.11 3.12 3.13\n" + cells, 1
    )


def test_a_host_lock_takes_any_python_it_serves_here(tmp_path, monkeypatch):
    import envkit.host.venv as host_venv
    from envkit.lock.lockfile import read_lock

    monkeypatch.setattr(host_venv, "this_platform", lambda: "linux/arm64")
    lock = tmp_path / "probe.lock"
    lock.write_text(
        universal_lock(
            {
                ("linux/amd64", "3.11"): "ok",
                ("linux/arm64", "3.11"): "ok",
                ("linux/arm64", "3.12"): "ok",
                ("linux/arm64", "3.13"): "no wheel for libtpu",
            }
        )
    )
    assert host_venv.served_pythons(read_lock(lock), lock) == ("3.11", "3.12")


def test_a_platform_the_lock_cannot_serve_is_one_line_naming_the_packages(tmp_path, capsys, monkeypatch):
    """make xla-env on aarch64: the lock's header knows which packages have no wheel there."""
    import envkit.host.venv as host_venv

    monkeypatch.setattr(host_venv, "this_platform", lambda: "linux/arm64")
    lock = tmp_path / "probe.lock"
    lock.write_text(
        universal_lock(
            {("linux/amd64", "3.11"): "ok"}
            | {("linux/arm64", v): "no wheel for libtpu torch-xla" for v in ("3.11", "3.12", "3.13")}
        ).replace("linux/amd64 linux/arm64,", "linux/amd64,")
    )
    code, out, err = bootstrap(capsys, str(lock), "--path", str(tmp_path / "venv"))
    assert (code, out) == (2, "")
    assert err == (
        f"envkit: error: {lock} cannot be installed on linux/arm64 (Linux aarch64): no wheel here for libtpu, "
        "torch-xla; it serves linux/amd64\n"
    )
    assert not (tmp_path / "venv").exists()


@pytest.mark.parametrize(
    ("system", "machine", "mac", "message"),
    [
        ("linux", "riscv64", "", "this host (linux/riscv64) is not supported: host environments run on linux/amd64, "
         "linux/arm64, macos/arm64"),
        ("darwin", "x86_64", "", "this host (macos/amd64) is not supported: host environments run on linux/amd64, "
         "linux/arm64, macos/arm64"),
        ("darwin", "arm64", "13.6", "macOS 13.6 is not supported: torch's Mac wheels need macOS 14.0 or later"),
    ],
)  # fmt: skip
def test_an_unsupported_host_is_one_line(monkeypatch, system, machine, mac, message):
    import platform

    from envkit.errors import EnvkitError
    from envkit.lock import host_platforms

    monkeypatch.setattr(host_platforms.sys, "platform", system)
    monkeypatch.setattr(platform, "machine", lambda: machine)
    monkeypatch.setattr(platform, "mac_ver", lambda: (mac, ("", "", ""), ""))
    with pytest.raises(EnvkitError) as refused:
        host_platforms.this_platform()
    assert str(refused.value) == message


def test_a_python_given_that_is_not_the_locks_is_refused(tmp_path, capsys):
    lock = tmp_path / "probe.lock"
    lock.write_text(lock_text("3.9", {"envkit-probe-a==1.0": "a" * 64}))
    code, _, err = bootstrap(capsys, str(lock), "--path", str(tmp_path / "venv"), "--python", sys.executable)
    assert code == 2
    assert err == (
        f"envkit: error: the lock needs Python 3.9; found {sys.executable} {sys.version.split()[0]}: "
        "pass --python with one\n"
    )
    assert not (tmp_path / "venv").exists()


@pytest.mark.parametrize("version", ["3.10.16", "3.14.2"])
def test_a_python_envkit_does_not_support_is_one_line_and_writes_nothing(tmp_path, capsys, monkeypatch, version):
    """`envkit venv --python` of a host lock (Pythons 3.11-3.13) with 3.10 (too old for the locks) or 3.14 (wheels
    missing): refused before any venv is made, naming what the lock takes and what was given."""
    import envkit.host.venv as host_venv
    from envkit.lock.inputs import requirements_inputs

    monkeypatch.setattr(host_venv, "this_platform", lambda: "linux/amd64")
    (tmp_path / "probe.in").write_text("envkit-probe-a==1.0\n")
    digest = requirements_inputs(tmp_path / "probe.in").digest()
    served = {(where, python): "ok" for where in ("linux/amd64", "linux/arm64") for python in ("3.11", "3.12", "3.13")}
    (tmp_path / "probe.lock").write_text(universal_lock(served).replace("0" * 64, digest, 1))
    python = fake_tool(tmp_path / "python", f"echo {version}\n")
    code, out, err = envkit(
        capsys,
        "venv",
        "--requirements",
        str(tmp_path / "probe.in"),
        "--path",
        str(tmp_path / "venv"),
        "--python",
        python,
    )
    assert (code, out) == (2, "")
    assert err == (
        f"envkit: error: the lock needs Python 3.11 or 3.12 or 3.13; found {python} {version}: pass --python with one\n"
    )
    assert not (tmp_path / "venv").exists()


def test_a_stale_host_lock_is_refused_in_one_line(tmp_path, capsys):
    (tmp_path / "probe.in").write_text("envkit-probe-a==1.0\n")
    (tmp_path / "probe.lock").write_text(lock_text(THIS_PYTHON, {"envkit-probe-a==0.9": "a" * 64}))
    code, _, err = envkit(
        capsys, "venv", "--requirements", str(tmp_path / "probe.in"), "--path", str(tmp_path / "venv")
    )
    assert code == 2
    assert err == (
        f"envkit: error: {tmp_path}/probe.lock is stale ({tmp_path}/probe.in changed since it was locked); "
        f"run `envkit lock --requirements {tmp_path}/probe.in`\n"
    )
    assert not (tmp_path / "venv").exists()


def test_an_unlocked_target_is_refused_in_one_line(capsys):
    code, _, err = envkit(
        capsys, "venv", "cpu", "--config", str(REPO_ROOT / "envkit.yaml"), "--path", "/nonexistent/venv"
    )
    assert code == 2
    assert err == (
        "envkit: error: target cpu is unlocked: docker/cpu/requirements.lock does not exist; lock it with "
        "`envkit lock --target cpu` where its indexes answer\n"
    )


@pytest.mark.parametrize(
    ("make", "problem"),
    [
        (
            lambda path: path.symlink_to(path.parent),
            "is a symbolic link: envkit venv replaces only a directory it can own",
        ),
        (lambda path: path.write_text("data"), "exists and is not a directory"),
        (
            lambda path: (path.mkdir(), (path / "notes.txt").write_text("mine")),
            "exists and is not a virtual environment envkit made (it holds no envkit-venv.txt)",
        ),
        # Issue 39 §1: its only check was pyvenv.cfg, and `python3 -m venv myproj; mkdir myproj/src` lost src/.
        (
            lambda path: (a_venv(path), (path / "src").mkdir(), (path / "src" / "model.py").write_text("x")),
            "exists and is not a virtual environment envkit made (it holds no envkit-venv.txt)",
        ),
        (
            lambda path: (
                a_venv(path, marks.VENV),
                (path / "src").mkdir(),
                (path / "src" / "model.py").write_text("x"),
            ),
            "holds src, which a virtual environment does not: envkit replaces only a folder holding a venv's files",
        ),
        (
            lambda path: (a_venv(path, b"{}"), (path / "train.py").write_text("x")),
            "exists and is not a virtual environment envkit made",
        ),
        (
            lambda path: (a_venv(path, b'{"lock_sha256": "ab"}'), (path / ".git").mkdir(), (path / "t.py").touch()),
            "holds .git, t.py, which a virtual environment does not",
        ),
    ],
    ids=["link", "file", "a-folder", "a-venv-made-by-hand", "envkit-venv-with-src", "not-a-marker", "old-marker-git"],
)
def test_only_a_venv_envkit_made_and_holding_nothing_else_is_ever_replaced(tmp_path, capsys, make, problem):
    lock = tmp_path / "probe.lock"
    lock.write_text(lock_text(THIS_PYTHON, {"envkit-probe-a==1.0": "a" * 64}))
    path = tmp_path / "venv"
    make(path)
    before = snapshot(tmp_path)
    code, _, err = bootstrap(capsys, str(lock), "--path", str(path))
    assert code == 2 and err.startswith(f"envkit: error: {path} {problem}") and err.count("\n") == 1
    assert snapshot(tmp_path) == before


def a_venv(path: Path, mark: bytes | None = None) -> None:
    """What `python -m venv` leaves at a venv's top; with ``mark``, envkit's mark file (bytes starting with
    "{" are the lock marker envkit-lock.json that venvs made before the mark file hold)."""
    (path / "bin").mkdir(parents=True)
    (path / "lib").mkdir()
    (path / "lib64").symlink_to("lib")
    (path / "pyvenv.cfg").write_text("home = /usr/bin\n")
    if mark is not None:
        (path / (MARKER if mark.startswith(b"{") else marks.VENV_FILE)).write_bytes(mark)


def snapshot(root: Path) -> dict[str, bytes | str]:
    """Every path under ``root`` with a file's bytes, a link's target or "dir"."""
    return {
        str(path.relative_to(root)): os.readlink(path)
        if path.is_symlink()
        else (path.read_bytes() if path.is_file() else "dir")
        for path in sorted(root.rglob("*"))
    }


def test_a_project_that_is_itself_a_venv_is_never_replaced(tmp_path, capsys, monkeypatch):
    """Issue 39 §1: `cd proj; python -m venv .` then `envkit venv ... --path "$PWD"` deleted train.py, the notes,
    requirements/ and .git, and said it succeeded."""
    project = tmp_path / "proj"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(project)], check=True)
    (project / ".git").mkdir()
    (project / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (project / "train.py").write_text("print('train')\n")
    (project / "notes.md").write_text("notes\n")
    (project / "requirements").mkdir()
    (project / "requirements" / "small.in").write_text("envkit-probe-a==1.0\n")
    monkeypatch.chdir(project)
    before = snapshot(tmp_path)
    code, out, err = envkit(capsys, "venv", "--requirements", "requirements/small.in", "--path", str(project))
    assert (code, out) == (2, "")
    assert err == (
        f"envkit: error: {project} exists and is not a virtual environment envkit made (it holds no "
        "envkit-venv.txt): envkit replaces only its own; remove it yourself or choose another --path\n"
    )
    assert snapshot(tmp_path) == before


def fake_children(monkeypatch) -> list[tuple[list[str], dict | None]]:
    """The children envkit venv runs, recorded, not run: `python -m venv` makes a venv's folders."""
    from envkit.host import venv as host_venv

    ran = []

    def completed(argv, env=None):
        ran.append((argv, env))
        if argv[1:3] == ["-m", "venv"]:
            a_venv(Path(argv[-1]))
        return subprocess.CompletedProcess(argv, 0, "")

    monkeypatch.setattr(host_venv, "_completed", completed)
    return ran


def test_a_venv_envkit_made_is_marked_and_replaced(tmp_path, monkeypatch):
    """The mark is written as soon as the folder is made; a marked folder holding a venv's files alone is replaced."""
    from envkit.host import venv as host_venv

    fake_children(monkeypatch)
    requirements = tmp_path / "probe.in"
    requirements.write_text("envkit-probe-a==1.0\n")
    path = tmp_path / "v"
    for _ in range(2):
        host_venv.make_unlocked_venv(requirements, (THIS_PYTHON,), path, unlocked_because="no lock")
        assert marks.begins_with(path / marks.VENV_FILE, marks.VENV)
        assert sorted(entry.name for entry in path.iterdir()) == [
            "bin",
            "envkit-venv.txt",
            "lib",
            "lib64",
            "pyvenv.cfg",
        ]


def test_the_bootstrap_module_needs_the_standard_library_alone():
    """make runs it with the host's python3 before any environment exists: no site-packages (-S), no PyYAML."""
    code = (
        "import sys; import envkit.host.venv; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('yaml', 'jinja2', 'jsonschema', 'docker')))"
    )
    done = subprocess.run(
        [sys.executable, "-S", "-c", code],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        env={"PATH": os.environ["PATH"]},
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "[]\n", "")


def test_a_long_install_says_each_step_and_bounds_the_network(tmp_path, capsys, monkeypatch):
    """Issue 28 §18: pip retried an unreachable --find-links page for 6.5 minutes and printed nothing."""
    from envkit.host import venv as host_venv

    ran = fake_children(monkeypatch)
    requirements = tmp_path / "probe.in"
    requirements.write_text("envkit-probe-a==1.0\n")
    sources = host_venv.Sources(None, ("http://192.0.2.1/wheels/",))
    host_venv.make_unlocked_venv(requirements, THIS_PYTHON, tmp_path / "v", unlocked_because="no lock", sources=sources)
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith(f"envkit: making {tmp_path / 'v'} with Python {THIS_PYTHON}")
    assert err[1].startswith(f"envkit: installing the pins of {requirements} with pip, unlocked: no lock (")
    pip = ran[-1][0]
    assert f"--timeout={host_venv.NETWORK_TIMEOUT_S}" in pip and f"--retries={host_venv.NETWORK_RETRIES}" in pip

    lock = tmp_path / "probe.lock"
    lock.write_text(lock_text(THIS_PYTHON, {"envkit-probe-a==1.0": "a" * 64}))
    monkeypatch.setattr(host_venv, "find_uv", lambda: "/usr/bin/uv")
    host_venv.make_venv(lock, tmp_path / "w", installer="uv")
    assert ran[-1][1]["UV_HTTP_TIMEOUT"] == str(host_venv.NETWORK_TIMEOUT_S)
    assert ran[-1][1]["UV_HTTP_RETRIES"] == str(host_venv.NETWORK_RETRIES)
    assert "hash-checked" in capsys.readouterr().err


def test_a_venv_stopped_by_sigterm_leaves_the_old_one_as_it_was(tmp_path):
    """Issue 28 §18: a closed terminal (SIGHUP) or kill (SIGTERM) while installing left a partial venv."""
    old = tmp_path / "venv"
    a_venv(old, marks.VENV)
    (old / "lib" / "mine").write_text("the old venv")
    script = (
        "import os, signal, subprocess, sys; from pathlib import Path; from envkit.host import venv as v\n"
        "def run(argv, env=None):\n"
        "    if argv[1:3] == ['-m', 'venv']: Path(argv[-1]).mkdir()\n"
        "    if 'install' in argv: os.kill(os.getpid(), signal.SIGTERM)\n"
        "    return subprocess.CompletedProcess(argv, 0, '')\n"
        "v._completed = run\n"
        "req = Path(sys.argv[1]); req.write_text('x==1\\n')\n"
        "try:\n"
        "    v.make_unlocked_venv(req, sys.argv[3], Path(sys.argv[2]), unlocked_because='test')\n"
        "except KeyboardInterrupt:\n"
        "    sys.exit(130)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "x.in"), str(old), THIS_PYTHON],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
    )
    assert done.returncode == 130, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["venv", "x.in"]
    assert sorted(p.name for p in old.iterdir()) == ["bin", "envkit-venv.txt", "lib", "lib64", "pyvenv.cfg"]
    assert (old / "lib" / "mine").read_text() == "the old venv"


def python_without_ensurepip(tmp_path: Path) -> str:
    """This Python without ensurepip, as Debian's and Ubuntu's python3 is until python3-venv is installed: its own
    binary in a prefix whose standard library (links to this one's) lacks ensurepip."""
    base = Path(sys.base_prefix)
    minor = f"python{THIS_PYTHON}"
    prefix = tmp_path / "stripped"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "lib" / minor / "site-packages").mkdir(parents=True)
    for entry in (base / "lib").iterdir():  # libpython, where the binary links to it
        if entry.name != minor:
            (prefix / "lib" / entry.name).symlink_to(entry)
    for entry in (base / "lib" / minor).iterdir():
        if entry.name not in ("ensurepip", "site-packages"):
            (prefix / "lib" / minor / entry.name).symlink_to(entry)
    python = prefix / "bin" / minor
    python.write_bytes(Path(sys._base_executable).read_bytes())
    python.chmod(0o755)
    done = subprocess.run([python, "-c", "import ensurepip"], capture_output=True, text=True)
    if "No module named 'ensurepip'" not in done.stderr:
        pytest.skip(f"this Python cannot run from a copied prefix: {done.stderr.strip()[-200:]}")
    return str(python)


def test_a_python_without_ensurepip_is_one_line_naming_the_package(tmp_path, capsys, monkeypatch):
    """Issue 44 §1: `make demo` on Debian without python3-venv said `python -m venv failed: no output`."""
    import envkit.host.venv as host_venv

    monkeypatch.setattr(host_venv, "find_uv", lambda: None)
    python = python_without_ensurepip(tmp_path)
    lock = tmp_path / "probe.lock"
    lock.write_text(lock_text(THIS_PYTHON, {"envkit-probe-a==1.0": "a" * 64}))
    code, out, err = bootstrap(capsys, str(lock), "--path", str(tmp_path / "venv"), "--python", python)
    version = subprocess.run([python, "-c", "import platform; print(platform.python_version())"], **TEXT).stdout
    assert (code, out) == (2, "")
    assert err.splitlines()[-1] == (
        f"envkit: error: python -m venv failed: Python {version.strip()} ({python}) has no ensurepip to put pip in a "
        f"venv; on Debian and Ubuntu install python3-venv (apt install python{THIS_PYTHON}-venv), or install uv, "
        "with which envkit makes the venv without pip"
    )
    assert not (tmp_path / "venv").exists()


def test_with_uv_a_python_without_ensurepip_makes_the_venv_without_pip(tmp_path, capsys, monkeypatch):
    """Issue 44 §1: uv installs the lock, so the venv needs no pip and no ensurepip."""
    import envkit.host.venv as host_venv

    installs = []
    monkeypatch.setattr(host_venv, "find_uv", lambda: "/usr/bin/uv")
    monkeypatch.setattr(host_venv, "_install", lambda installer, venv, what, sources: installs.append(installer))
    python = python_without_ensurepip(tmp_path)
    lock = tmp_path / "probe.lock"
    lock.write_text(lock_text(THIS_PYTHON, {"envkit-probe-a==1.0": "a" * 64}))
    code, out, err = bootstrap(capsys, str(lock), "--path", str(tmp_path / "venv"), "--python", python)
    assert code == 0, err
    assert installs == ["/usr/bin/uv"]
    assert not list((tmp_path / "venv" / "lib").glob("python*/site-packages/pip"))
    done = subprocess.run([tmp_path / "venv" / "bin" / "python", "-c", "import sys; print(sys.prefix)"], **TEXT)
    assert done.stdout.strip() == str(tmp_path / "venv")


def test_what_a_failed_child_printed_on_stdout_reaches_the_user(tmp_path, capsys):
    """Issue 44 §1: the reason was read from stderr alone; Debian's venv prints its own on stdout."""
    python = fake_tool(
        tmp_path / "python3",
        f'case "$2" in venv) echo "the disk is read-only here"; exit 1;; esac\nexec {sys.executable} "$@"\n',
    )
    lock = tmp_path / "probe.lock"
    lock.write_text(lock_text(THIS_PYTHON, {"envkit-probe-a==1.0": "a" * 64}))
    code, _, err = bootstrap(capsys, str(lock), "--path", str(tmp_path / "venv"), "--python", python)
    assert (code, err.splitlines()[-1]) == (2, "envkit: error: python -m venv failed: the disk is read-only here")


TEXT = {"capture_output": True, "text": True, "check": True}


# --------------------------------------------------------------------------- installs (slow)


@pytest.fixture()
def probe_index(tmp_path, monkeypatch):
    """Two real wheels of made-up projects on a loopback index; yields (the index, {requirement: sha256})."""
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))
    monkeypatch.setenv("PIP_CACHE_DIR", str(tmp_path / "pip-cache"))
    with IndexServer(tmp_path / "www") as server:
        index = server.index("simple")
        pins = {
            "envkit-probe-a==1.0": index.add("envkit-probe-a", "1.0"),
            "envkit-probe-b==2.0": index.add("envkit-probe-b", "2.0"),
        }
        yield index, pins


def installed(venv: Path) -> dict[str, str]:
    code = "import importlib.metadata as m, json; print(json.dumps({d.metadata['Name']: d.version for d in m.distributions()}))"
    return json.loads(
        subprocess.run([venv / "bin" / "python", "-c", code], capture_output=True, text=True, check=True).stdout
    )


@pytest.mark.slow
@pytest.mark.parametrize("installer", ["uv", "pip"])
def test_a_venv_holds_exactly_the_lock_and_records_its_sha(tmp_path, probe_index, installer):
    """What it costs: two venvs per installer (python -m venv with its pip), about 10 s."""
    from envkit.host.venv import Sources, make_venv

    index, pins = probe_index
    url = index.url
    lock = tmp_path / "probe.lock"
    lock.write_text(lock_text(THIS_PYTHON, pins))
    venv = tmp_path / "venv"
    made = make_venv(lock, venv, sources=Sources(index_url=url), installer=installer)
    assert made.installer == installer
    assert {name: version for name, version in installed(venv).items() if name.startswith("envkit-probe")} == {
        "envkit-probe-a": "1.0",
        "envkit-probe-b": "2.0",
    }
    marker = json.loads((venv / MARKER).read_text())
    assert marker["lock_sha256"] == hashlib.sha256(lock.read_bytes()).hexdigest() == made.lock.sha256
    assert (marker["python"], marker["interpreter"], marker["lock"]) == (
        sys.version.split()[0],
        sys.executable,
        str(lock.resolve()),
    )

    # A lock whose sha256 for one wheel is not the served file's: refused in one line, the old venv kept.
    tampered = tmp_path / "tampered.lock"
    tampered.write_text(lock_text(THIS_PYTHON, {**pins, "envkit-probe-b==2.0": "0" * 64}))
    from envkit.errors import EnvkitError

    with pytest.raises(EnvkitError) as refused:
        make_venv(tampered, venv, sources=Sources(index_url=url), installer=installer)
    assert "\n" not in str(refused.value)
    assert str(refused.value).startswith(
        f"{installer} refused envkit-probe-b==2.0: its file has sha256 "
        f"{pins['envkit-probe-b==2.0']}, which the lock does not list (expected {'0' * 64})"
    )
    assert json.loads((venv / MARKER).read_text())["lock_sha256"] == made.lock.sha256
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".venv")) == []


@pytest.mark.slow
def test_a_host_environment_installs_its_lock_or_else_its_pins_unlocked(tmp_path, probe_index, capsys, monkeypatch):
    """What make xla-env / sky-env / tpu-env run: the lock beside requirements/<name>.in where there is one."""
    from envkit.lock.inputs import requirements_inputs

    index, pins = probe_index
    url = index.url
    monkeypatch.setenv("PIP_INDEX_URL", url)  # the unlocked install resolves with pip's own settings
    requirements = tmp_path / "probe.in"
    requirements.write_text("# two probes\nenvkit-probe-a==1.0\nenvkit-probe-b==2.0\n")
    code, out, err = envkit(capsys, "venv", "--requirements", str(requirements), "--path", str(tmp_path / "unlocked"))
    assert code == 0, err
    assert err.splitlines()[1].startswith(
        f"envkit: installing the pins of {requirements} with pip, unlocked: {tmp_path}/probe.lock does not exist ("
    )
    assert out.startswith(
        f"made {tmp_path}/unlocked from the pins of {requirements} (unlocked: its runs record no lock)"
    )
    assert not (tmp_path / "unlocked" / MARKER).exists()

    text = lock_text(THIS_PYTHON, pins).replace("0" * 64, requirements_inputs(requirements).digest(), 1)
    (tmp_path / "probe.lock").write_text(text)
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple/")
    monkeypatch.setenv("UV_INDEX_URL", url)  # a locked install verifies every file, wherever it comes from
    code, out, err = envkit(capsys, "venv", "--requirements", str(requirements), "--path", str(tmp_path / "locked"))
    assert code == 0 and all(line.startswith(("envkit: making ", "envkit: installing ")) for line in err.splitlines())
    assert (
        json.loads((tmp_path / "locked" / MARKER).read_text())["lock_sha256"]
        == hashlib.sha256(text.encode()).hexdigest()
    )


@pytest.mark.slow
def test_without_uv_pip_installs_the_locks_own_uv_which_installs_the_rest(tmp_path, probe_index, monkeypatch):
    """What `make venv` does on a fresh host: the dev lock pins uv, pip installs that one (hash-checked)."""
    from wheel_index import file_sha256
    from xla_env import environment_missing

    import envkit.host.venv as host_venv
    from envkit.host.venv import Sources, make_venv

    index, pins = probe_index
    url = index.url
    wheels = tmp_path / "uv-wheel"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "--only-binary=:all:",
            "--dest",
            str(wheels),
            "uv==0.13.9",
        ],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        environment_missing(
            f"pip cannot fetch uv's wheel: {(done.stderr.strip().splitlines() or ['?'])[-1]}", "ENVKIT_REQUIRE_INDEX"
        )
    [uv_wheel] = wheels.glob("uv-*.whl")
    served = index.publish(uv_wheel)
    lock = tmp_path / "probe.lock"
    lock.write_text(lock_text(THIS_PYTHON, {**pins, "uv==0.13.9": file_sha256(served)}))
    monkeypatch.setattr(host_venv, "find_uv", lambda: None)
    made = make_venv(lock, tmp_path / "venv", sources=Sources(index_url=url))
    assert made.installer == "uv (from the lock, by pip)"
    assert {"envkit-probe-a", "envkit-probe-b", "uv"} <= set(installed(tmp_path / "venv"))


def test_an_input_for_another_platform_is_one_line_and_writes_nothing(tmp_path, capsys, monkeypatch):
    """make tpu-env on an aarch64 host: tpu.in (no lock here) serves linux/amd64 only."""
    import envkit.lock.host_platforms as host_platforms

    monkeypatch.setattr(host_platforms, "this_platform", lambda: "linux/arm64")
    requirements = tmp_path / "probe.in"
    requirements.write_text("# platforms: linux/amd64\nenvkit-probe-a==1.0\n")
    code, out, err = envkit(capsys, "venv", "--requirements", str(requirements), "--path", str(tmp_path / "venv"))
    assert (code, out) == (2, "")
    assert err == (
        f"envkit: error: {requirements} does not run on linux/arm64: it serves linux/amd64 (its `# platforms:` line)\n"
    )
    assert not (tmp_path / "venv").exists()


def test_an_interpreter_that_ran_is_not_started_again_until_it_changes(tmp_path, monkeypatch):
    """Issue 42 goal 2: `envkit experiment --python PY` started PY once more on every run to see it is a Python
    (30-50 ms); now once, until the file at that path changes. A failure is never remembered."""
    from envkit.errors import EnvkitError
    from envkit.host import interpreter

    monkeypatch.setenv("ENVKIT_CACHE_DIR", str(tmp_path / "cache"))
    python = tmp_path / "python"
    python.write_text("#!/bin/sh\necho 3.11.7\n")
    python.chmod(0o755)
    started = []
    probe = interpreter.version
    monkeypatch.setattr(interpreter, "version", lambda path: started.append(path) or probe(path))
    assert [interpreter.check_interpreter(str(python)) for _ in range(3)] == [str(python)] * 3
    assert started == [str(python)]
    os.utime(python, ns=(0, 0))  # another file at that path
    interpreter.check_interpreter(str(python))
    assert len(started) == 2
    python.write_text("#!/bin/sh\nexit 1\n")
    for _ in range(2):
        with pytest.raises(EnvkitError, match="is not a Python interpreter"):
            interpreter.check_interpreter(str(python))
    assert len(started) == 4
