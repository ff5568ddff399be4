"""envkit.project.files: what an image holds and a notebook carries of the project."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from envkit.errors import EnvkitError
from envkit.project.files import project_files


def _git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True)


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    root = tmp_path / "mine"
    (root / "src").mkdir(parents=True)
    (root / "train.py").write_text("print('train')\n")
    (root / "src" / "model.py").write_text("LAYERS = 2\n")
    (root / "notes.md").write_text("tracked, then ignored\n")
    _git(root, "init", "-q")
    _git(root, "add", "train.py", "src/model.py", "notes.md")
    (root / "data").mkdir()
    (root / "data" / "big.bin").write_bytes(b"\0" * 4096)  # untracked: never the image's
    return root


def test_the_tracked_files_less_dockerignore(repository):
    (repository / ".dockerignore").write_text("# docs stay out\n*.md\n")
    files = project_files(repository)
    assert files.paths == ("src/model.py", "train.py") and files.tracked
    assert files.sizes == (len("LAYERS = 2\n"), len("print('train')\n"))


def test_a_deleted_tracked_file_and_a_symlink_are_left_out(repository):
    (repository / "notes.md").unlink()
    (repository / "link.py").symlink_to(repository / "train.py")
    _git(repository, "add", "link.py")
    assert project_files(repository).paths == ("src/model.py", "train.py")


def test_a_project_in_a_subfolder_of_the_repository_lists_its_own_files(repository):
    (repository / "src" / "envkit.yaml").write_text("targets: {}\n")
    _git(repository, "add", "src/envkit.yaml")
    assert project_files(repository / "src").paths == ("envkit.yaml", "model.py")


def test_a_folder_without_git_is_listed_whole_less_dockerignore(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "big.bin").write_bytes(b"\0")
    (tmp_path / "train.py").write_text("print('train')\n")
    (tmp_path / ".dockerignore").write_text("data\n")
    files = project_files(tmp_path)
    assert files.paths == (".dockerignore", "train.py") and not files.tracked
    assert "is not a git work tree" in files.source()


def test_files_over_the_limit_are_one_line_naming_the_largest(repository):
    (repository / "weights.pt").write_bytes(b"\0" * 1_500_000)
    _git(repository, "add", "weights.pt")
    with pytest.raises(EnvkitError) as refused:
        project_files(repository, limit_mb=1)
    message = str(refused.value)
    assert "\n" not in message and "over the 1 MB limit" in message
    assert message.index("weights.pt (1.5 MB)") < message.index("train.py") and ".dockerignore" in message


def test_what_envkit_writes_is_never_the_projects(repository, tmp_path):
    # Tracked or not, render's output: an image target's rendered files change with every other target's render.
    marked = {
        "docker/cpu/Dockerfile": "# Rendered by envkit from envkit.yaml\n",
        "docker/cpu/envkit_run.py": '"""envkit\'s run wrapper: a run\n',
        "notebooks/colab-t4/requirements.lock": '# envkit lock for target "colab-t4"\n',
        "notebooks/colab-t4/gpu.ipynb": '{"cells": [{"source": ["Rendered by envkit from experiment `gpu`"]}]}\n',
        "docker/cuda/pushed.json": '{\n  "format": 1,\n  "images": {},\n  "target": "cuda"\n}\n',
    }
    for rendered, text in marked.items():
        (repository / rendered).parent.mkdir(parents=True, exist_ok=True)
        (repository / rendered).write_text(text)
    _git(repository, "add", "docker", "notebooks")
    assert project_files(repository).paths == ("notes.md", "src/model.py", "train.py")
    # The user's own files there are the project's: a module train.py imports, a Dockerfile envkit did not write.
    for name in ("notebooks/helpers.py", "docker/mine/Dockerfile"):
        (repository / name).parent.mkdir(parents=True, exist_ok=True)
        (repository / name).write_text("# mine\n")
    _git(repository, "add", "docker", "notebooks")
    assert project_files(repository).paths == (
        "docker/mine/Dockerfile",
        "notebooks/helpers.py",
        "notes.md",
        "src/model.py",
        "train.py",
    )
    # Outside git, the runs' results and data and the venvs too: every run would change the next image.
    folder = tmp_path / "plain"
    made = (
        "results/run.json",
        "data/x.bin",
        ".venv/bin/python",
        ".cache/rendered",
        "src/.ruff_cache/x",
    )
    for name in ("train.py", *made):
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text("x\n")
    assert project_files(folder).paths == ("train.py",)


# Fake credentials, put together here so that this file itself holds none a scanner would flag.
PRIVATE_KEY = "-----BEGIN " + "OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----\n"
GITHUB_TOKEN = "ghp" + "_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
SECRET_NAMED = (".env", ".env.local", ".netrc", "credentials.json", "keys/id_rsa", "server.pem", "api.key")
SECRET_UNDER = (".aws/credentials", ".ssh/config", "secrets/token.txt", ".git-credentials")


def _tracked_project(root: Path, names: dict[str, str]) -> Path:
    for name, text in names.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    _git(root, "init", "-q")
    _git(root, "add", "-f", ".")  # every file the test wrote, binary ones too
    return root


def test_files_that_look_like_secrets_by_name_or_content_are_left_out_and_named(tmp_path, capsys):
    names = {name: "SECRET_API_KEY=hunter2\n" for name in SECRET_NAMED + SECRET_UNDER}
    names |= {"train.py": "print('train')\n", "deploy.py": f"TOKEN = '{GITHUB_TOKEN}'\n", "notes.txt": PRIVATE_KEY}
    files = project_files(_tracked_project(tmp_path / "mine", names))
    assert files.paths == ("train.py",)
    left_out = dict(files.secrets)
    assert set(left_out) == set(names) - {"train.py"}
    assert (
        left_out["deploy.py"] == 'holds a secret detect-secrets calls "GitHub Token"'
        and left_out["notes.txt"] == "holds a private key"
    )
    assert left_out["keys/id_rsa"] == "named id_rsa*" and left_out[".aws/credentials"] == "under .aws/"
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("envkit: left out 13 file(s) that look like secrets")
    assert "include_secrets" in err and ".env (named .env)" in err


def test_a_secret_name_in_capitals_is_a_secret_too(tmp_path, capsys):
    # A name's case says nothing about what it holds: .ENV and Server.PEM were carried into every image.
    names = {name: "SECRET_API_KEY=hunter2\n" for name in ("config/.ENV", "Server.PEM", "KEYS/ID_RSA", ".AWS/config")}
    files = project_files(_tracked_project(tmp_path / "mine", names | {"train.py": "print('train')\n"}))
    assert files.paths == ("train.py",)
    assert dict(files.secrets) == {
        "config/.ENV": "named .env",
        "Server.PEM": "named *.pem",
        "KEYS/ID_RSA": "named id_rsa*",
        ".AWS/config": "under .AWS/",
    }
    assert capsys.readouterr().err.startswith("envkit: left out 4 file(s) that look like secrets")


def test_the_credential_files_of_the_tools_a_user_of_envkit_keeps_are_secrets(tmp_path):
    # Each went into images and notebooks: Kaggle's API token (kaggle.json, which envkit's Kaggle targets ask
    # for), gcloud's application default credentials, s3cmd's and boto's, an old Docker login, a KeePass
    # database, a Kerberos keytab, and the Azure and Hugging Face CLIs' folders.
    names = (
        "kaggle.json",
        ".kaggle/kaggle.json",
        "gcp/application_default_credentials.json",
        ".s3cfg",
        ".boto",
        ".dockercfg",
        "vault.kdbx",
        "svc.keytab",
        ".azure/msal_token_cache.json",
        ".huggingface/token",
    )
    root = _tracked_project(tmp_path / "mine", {name: "x\n" for name in names} | {"train.py": "print(1)\n"})
    files = project_files(root, quiet=True)
    assert files.paths == ("train.py",)
    assert set(dict(files.secrets)) == set(names)


def test_a_password_in_a_url_is_a_secret_and_a_placeholder_is_not(tmp_path):
    """Before: a tracked settings.py with a database URL's password, or a pip.conf whose index URL holds a token,
    went into every image and notebook; detect-secrets' basic-auth rule finds them."""
    names = {
        "settings.py": "DATABASE_URL = 'postgres://" + "trainer:Xk7pQ2vR9@db.internal:5432/runs'\n",
        "pip.conf": "[global]\nindex-url = https://" + "ci:9f8e7d6c5b4a@pkgs.example.org/simple\n",
        "README.md": "Set https://user:${TOKEN}@host or https://<user>:<password>@host, ssh://git@host:22/x\n",
        "train.py": "URL = 'http://localhost:8080/a@b'\n",
    }
    files = project_files(_tracked_project(tmp_path / "mine", names), quiet=True)
    assert files.paths == ("README.md", "train.py")
    assert dict(files.secrets) == {"pip.conf": "holds a password in a URL", "settings.py": "holds a password in a URL"}


def test_a_private_key_in_base64_is_a_secret(tmp_path):
    """Before: a kubeconfig (client-key-data) or a Kubernetes Secret manifest (tls.key) under an ordinary name holds
    its private key base64-encoded, as both formats do, and went into every image and notebook."""
    import base64

    def encoded(kind: str) -> str:
        return base64.b64encode(PRIVATE_KEY.replace("OPENSSH ", kind).encode()).decode()

    names = {
        "cluster.yaml": f"users:\n- name: me\n  user:\n    client-key-data: {encoded('')}\n",
        "k8s/tls.yaml": f"kind: Secret\ndata:\n  tls.key: {encoded('RSA ')}\n",
        "k8s/ec.yaml": f"data:\n  key: {encoded('EC ')}\n",
        "certs.yaml": "ca: " + base64.b64encode(b"-----BEGIN CERTIFICATE-----\nMIIB\n").decode() + "\n",
    }
    files = project_files(_tracked_project(tmp_path / "mine", names), quiet=True)
    assert files.paths == ("certs.yaml",)
    assert set(dict(files.secrets)) == {"cluster.yaml", "k8s/tls.yaml", "k8s/ec.yaml"}
    assert set(dict(files.secrets).values()) == {"holds a private key (base64)"}


def test_a_secret_straddling_two_read_blocks_is_found(tmp_path):
    from envkit.project import secrets

    padding = "x" * (secrets.SCAN_BLOCK - 10)
    files = project_files(_tracked_project(tmp_path / "mine", {"big.txt": padding + PRIVATE_KEY}), quiet=True)
    assert files.paths == () and dict(files.secrets) == {"big.txt": "holds a private key"}


def test_include_secrets_is_the_only_way_in_a_file_or_a_folder(tmp_path, capsys):
    names = {".env": "A=1\n", "secrets/a.key": "k\n", "secrets/b.txt": GITHUB_TOKEN, "server.pem": "p\n"}
    files = project_files(_tracked_project(tmp_path / "mine", names), include_secrets=(".env", "secrets"))
    assert files.paths == (".env", "secrets/a.key", "secrets/b.txt")
    assert files.secrets == (("server.pem", "named *.pem"),)
    assert "server.pem (named *.pem)" in capsys.readouterr().err


def test_outside_git_gitignore_is_honoured_as_git_would_and_secrets_are_left_out(tmp_path):
    folder = tmp_path / "plain"
    made = {
        ".gitignore": "*.log\n/build/\n!keep.log\n",
        "src/.gitignore": "generated.py\n",
        "train.py": "print('train')\n",
        "run.log": "x\n",
        "keep.log": "kept by the ! exception\n",
        "build/out.py": "x\n",
        "src/generated.py": "x\n",
        "src/model.py": "x\n",
        ".env": "SECRET_API_KEY=1\n",
        ".aws/credentials": "[default]\n",
        ".git-credentials": "https://u:p@example.com\n",
        "secrets/api.key": "k\n",
        "server.pem": PRIVATE_KEY,
    }
    for name, text in made.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    files = project_files(folder, quiet=True)
    assert files.paths == (".gitignore", "keep.log", "src/.gitignore", "src/model.py", "train.py")
    assert [name for name, _ in files.secrets] == [
        ".aws/credentials",
        ".env",
        ".git-credentials",
        "secrets/api.key",
        "server.pem",
    ]
    assert "its .gitignore files do not exclude" in files.source()


def test_include_secrets_in_the_config_is_a_list_of_relative_paths(tmp_path):
    from envkit.project.load import load_config

    config = tmp_path / "envkit.yaml"
    base = "targets:\n  cpu: {kind: cpu, torch: 2.5.1}\n"
    config.write_text(base + "include_secrets: [.env, certs/server.pem]\n")
    assert load_config(config).include_secrets == (".env", "certs/server.pem")
    for bad in ("[../outside.key]", "[/etc/ssl/key.pem]", ".env"):
        config.write_text(base + f"include_secrets: {bad}\n")
        with pytest.raises(EnvkitError) as refused:
            load_config(config)
        assert "include_secrets" in str(refused.value) and "\n" not in str(refused.value)


def test_a_submodule_is_named_and_a_file_inside_it_is_refused_saying_so(repository, tmp_path, capsys):
    vendored = tmp_path / "vendored"
    vendored.mkdir()
    (vendored / "lib.py").write_text("X = 1\n")
    _git(vendored, "init", "-q")
    _git(vendored, "add", "lib.py")
    _git(vendored, "-c", "user.name=t", "-c", "user.email=t@e", "commit", "-q", "-m", "lib")
    _git(repository, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(vendored), "third/vendored")
    files = project_files(repository)
    assert files.submodules == ("third/vendored",) and "third/vendored/lib.py" not in files.paths
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "left out the git submodule(s) third/vendored" in err
    with pytest.raises(EnvkitError, match="third/vendored/lib.py is inside the git submodule third/vendored, whose"):
        files.require("third/vendored/lib.py")


def test_a_file_name_that_is_not_utf8_is_left_out_and_named_in_git_and_outside(repository, tmp_path, capsys):
    odd = os.fsdecode(b"d\xff/f\xfe.py")
    (repository / odd).parent.mkdir()
    (repository / odd).write_text("x = 1\n")
    _git(repository, "add", odd)
    folder = tmp_path / "plain"
    (folder / odd).parent.mkdir(parents=True)
    (folder / odd).write_text("x = 1\n")
    for root in (repository, folder):
        files = project_files(root)
        assert files.undecodable == ("d\\xff/f\\xfe.py",) and odd not in files.paths
        err = capsys.readouterr().err
        assert "left out 1 file(s) whose names are not UTF-8" in err and "d\\xff/f\\xfe.py" in err
        err.encode("utf-8")  # the line itself is UTF-8


def test_a_commands_script_that_git_does_not_track_is_refused_in_one_line(repository):
    (repository / "new.py").write_text("print('new')\n")
    files = project_files(repository)
    files.require_program(("python", "train.py", "--data", "data/big.bin"))  # the script, not its data
    with pytest.raises(EnvkitError) as refused:
        files.require_program(("python", "new.py"))
    assert str(refused.value).startswith(f"new.py is not among the files git tracks in {repository}")
    assert "git add, then commit" in str(refused.value)


def test_credential_files_under_other_names_and_backups_of_secrets_are_secrets(tmp_path):
    """Before (issue 39 §5): each went into build contexts and notebooks' archives with nothing named: a dotfile
    without its dot or with an extension, tools' token files, and the backups and copies of a secret's name."""
    secret = {
        "npmrc": "named like .npmrc",
        ".yarnrc.yml": "named like .yarnrc",
        "pypirc.cfg": "named like .pypirc",
        "deploy/kubeconfig": "named kubeconfig",
        ".vault-token": "named .vault-token",
        ".databrickscfg": "named .databrickscfg",
        ".cache/huggingface/token": "named huggingface/token",
        "terraform.tfstate.backup": "named *.tfstate (a backup or copy)",
        "infra/.tfstate.backup": "named *.tfstate (a backup or copy)",
        ".netrc.bak": "named .netrc (a backup or copy)",
        ".env~": "named .env (a backup or copy)",
        "kaggle (1).json": "named kaggle.json (a backup or copy)",
        ".pgpass.orig": "named .pgpass (a backup or copy)",
        ".git-credentials.old": "named .git-credentials (a backup or copy)",
        ".kaggle.json.swp": "named kaggle.json (a backup or copy)",
        "#.netrc#": "named .netrc (a backup or copy)",
    }
    # Names that only look alike: a module named after a tool, a conda environment, an ordinary backup.
    kept = ("boto.py", "netrc.py", "env.yml", "notes.md.bak", "config.json", "tokenizer/token.py")
    names = {name: "x = 1\n" for name in (*secret, *kept)}
    files = project_files(_tracked_project(tmp_path / "mine", names), quiet=True)
    assert files.paths == tuple(sorted(kept))
    assert dict(files.secrets) == secret


# Fake tokens of the forms each issuer fixes, put together here as PRIVATE_KEY is.
SLACK_WEBHOOK = "https://hooks.slack.com" + "/services/T0AB12CD3/B0EF45GH6/" + "aB3dE6gH9jK2mN5pQ8sT1vW4"
AZURE_KEY = "AccountKey=" + "Zm9vYmFy" * 11
FAKE_TOKENS = {
    "notify.py": (f"URL = '{SLACK_WEBHOOK}'\n", 'holds a secret detect-secrets calls "Slack Token"'),
    "storage.py": (
        f"CONN = 'DefaultEndpointsProtocol=https;AccountName=runs;{AZURE_KEY};EndpointSuffix=core.windows.net'\n",
        'holds a secret detect-secrets calls "Azure Storage Account access key"',
    ),
    "cluster.yaml": (
        "users:\n- name: ci\n  user:\n    token: eyJhbGciOiJSUzI1NiJ9" + ".eyJzdWIiOiJjaSJ9.c2lnbmF0dXJl\n",
        'holds a secret detect-secrets calls "JSON Web Token"',
    ),
    "bot.py": (
        "TOKEN = 'xapp" + "-1-A0123456789-1234567890123-" + "0a1b2c3d4e5f6a7b8c9d'\n",
        "holds a Slack app token",
    ),
    "client.json": (
        '{"client_secret": "GOCSPX' + '-aB3dE6gH9jK2mN5pQ8sT1vW4xY7z"}\n',
        "holds a Google OAuth client secret",
    ),
    "gen.py": ("KEY = 'r8" + "_aB3dE6gH9jK2mN5pQ8sT1vW4xY7zA0cF3iL6o'\n", "holds a Replicate token"),
    "llm.py": ("KEY = 'gsk" + "_" + "aB3dE6gH9jK2mN5pQ8sT1vW4" * 2 + "xY7z'\n", "holds a Groq key"),
    "jobs.py": ("HOST_TOKEN = 'dapi" + "0123456789abcdef0123456789abcdef'\n", "holds a Databricks token"),
    "hub.py": ("ORG = 'api_org" + "_aBcDeFgHiJkLmNoPqRsTuVwXyZaBcDeFgH'\n", "holds a Hugging Face token"),
    "cache.py": ("REDIS = 'redis://" + ":Xk7pQ2vR9@cache:6379/0'\n", "holds a password in a URL"),
    "settings.py": ("DB = 'postgresql://" + "admin:pa$$w0rd@db/runs'\n", "holds a password in a URL"),
    "config.json": (
        '{\n  "auths"' + ': {\n    "ghcr.io": {\n      "auth": "dXNlcjpnaHBfc2VjcmV0"\n    }\n  }\n}\n',
        "holds a registry login",
    ),
}


def test_tokens_that_detect_secrets_or_envkit_knows_are_secrets_by_content(tmp_path):
    """Before (issue 39 §5): each file went into build contexts and notebooks' archives with nothing named;
    detect-secrets' detectors find the first three, envkit's own rules (what those lack) the others."""
    names = {name: text for name, (text, _) in FAKE_TOKENS.items()}
    # Not secrets: a login held by a credential helper, a password that is a variable, a URL with a port.
    names |= {
        "docker.json": '{"auths": {"ghcr.io": {}}, "credsStore": "desktop"}\n',
        "deploy.py": "URL = 'postgresql://admin:$DB_PASSWORD@db/runs'  # or $(DB_PASSWORD) or ${DB_PASSWORD}\n",
        "serve.py": "URL = 'http://localhost:8080/a@b'\n",
    }
    files = project_files(_tracked_project(tmp_path / "mine", names), quiet=True)
    assert files.paths == ("deploy.py", "docker.json", "serve.py")
    assert dict(files.secrets) == {name: why for name, (_, why) in FAKE_TOKENS.items()}


def test_a_private_key_in_utf16_is_a_secret(tmp_path):
    """Before (issue 39 §5): a key saved by Windows' PowerShell (UTF-16 with a byte order mark) went out unseen."""
    root = tmp_path / "mine"
    root.mkdir()
    (root / "key.txt").write_bytes(PRIVATE_KEY.encode("utf-16"))
    (root / "big.txt").write_bytes(b"\xfe\xff" + ("x" * (1 << 20) + PRIVATE_KEY).encode("utf-16-be"))  # two blocks
    files = project_files(_tracked_project(root, {}), quiet=True)
    assert files.paths == ()
    assert dict(files.secrets) == {"key.txt": "holds a private key", "big.txt": "holds a private key"}


def test_a_key_inside_an_archive_is_a_secret(tmp_path):
    """Before (issue 39 §5): a .zip or .tgz holding a key went into images and notebooks; what the archive holds
    is looked at as the project's files are (envkit.project.archives)."""
    import tarfile
    import zipfile

    root = tmp_path / "mine"
    root.mkdir()
    with zipfile.ZipFile(root / "deploy.zip", "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("deploy/run.sh", "echo run\n")
        archive.writestr("deploy/id_ed25519", "x\n")
    (tmp_path / "notes.txt").write_text(PRIVATE_KEY)
    with tarfile.open(root / "backup.tgz", "w:gz") as archive:
        archive.add(tmp_path / "notes.txt", "backup/notes.txt")
    (tmp_path / "model.py").write_text("x = 1\n")
    with tarfile.open(root / "code.tar.gz", "w:gz") as archive:
        archive.add(tmp_path / "model.py", "code/model.py")
    files = project_files(_tracked_project(root, {}), quiet=True)
    assert files.paths == ("code.tar.gz",)
    assert dict(files.secrets) == {
        "deploy.zip": "holds deploy/id_ed25519 (named id_ed25519*)",
        "backup.tgz": "holds backup/notes.txt (holds a private key)",
    }
