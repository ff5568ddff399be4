"""Inventories read from filesystem tars and `docker save` layers, and what verify/diff make of them.

The tars are built here in the exact layouts the engine produces (`docker export`: one
flat tree; `docker save`: manifest.json, the config blob and one tar per layer with OCI
whiteouts), so these tests need no engine; tests/integration/test_docker_engine.py runs verify and diff against the real one.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from paths import DATA

from envkit.errors import EnvkitError
from envkit.image import diff as env_diff
from envkit.image import inventory, verify
from envkit.runs.environment import results_inventory
from envkit.runs.results import SCHEMA_VERSION, upgrade

SITE = "usr/local/lib/python3.11/site-packages"
STATUS = """Package: dpkg
Status: install ok installed
Architecture: amd64
Version: 1.21.22

Package: libc6
Status: install ok installed
Architecture: amd64
Version: 2.36-9+deb12u14

Package: removed-one
Status: deinstall ok config-files
Architecture: amd64
Version: 1.0

Package: tzdata
Status: install ok installed
Architecture: all
Version: 2025b-0+deb12u2
"""


def dist(name: str, version: str, record: str = "x.py,sha256=abc,1\n") -> dict[str, bytes]:
    base = f"{SITE}/{name.replace('-', '_')}-{version}.dist-info"
    return {
        f"{base}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\nbody\n".encode(),
        f"{base}/RECORD": record.encode(),
    }


def tar_bytes(files: dict[str, bytes | None], links: dict[str, str] | None = None) -> bytes:
    """A tar of ``files`` (None: a directory), plus symlinks ``links``."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            if data is None:
                info.type = tarfile.DIRTYPE
                archive.addfile(info)
            else:
                info.size = len(data)
                info.mtime = 12345
                archive.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            archive.addfile(info)
    return buffer.getvalue()


def filesystem(extra: dict[str, bytes] | None = None) -> dict[str, bytes]:
    return {
        "var/lib/dpkg/status": STATUS.encode(),
        "etc/hostname": b"abc\n",
        "opt/envkit/recipes/mnist.py": b"print()\n",
        **dist("torch", "2.13.0+cpu"),
        **dist("tqdm", "4.67.1"),
        **(extra or {}),
    }


def test_export_tar_gives_packages_dpkg_and_files():
    found = inventory.from_filesystem_tar(
        io.BytesIO(tar_bytes(filesystem(), {"usr/bin/python": "python3.11"})),
        "img",
        env={"CUDA_VERSION": "12.6.3"},
        labels={},
    )
    assert found.python == {"torch": "2.13.0+cpu", "tqdm": "4.67.1"}
    assert found.dpkg == {"dpkg": "1.21.22", "libc6": "2.36-9+deb12u14", "tzdata": "2025b-0+deb12u2"}
    assert found.files["opt/envkit/recipes/mnist.py"] == hashlib.sha256(b"print()\n").hexdigest()
    assert found.files["usr/bin/python"] == "-> python3.11"
    assert "etc/hostname" not in found.files  # the runtime writes it into every container
    assert found.versions["torch"] == "2.13.0+cpu" and found.versions["cuda"] == "12.6.3"


def test_dpkg_names_foreign_architectures():
    status = STATUS + "\nPackage: libc6\nStatus: install ok installed\nArchitecture: i386\nVersion: 2.36\n"
    assert inventory.parse_dpkg_status(status)["libc6:i386"] == "2.36"


def saved_image(path: Path, layers: list[bytes], config: dict) -> Path:
    blob = json.dumps(config).encode()
    config_name = hashlib.sha256(blob).hexdigest() + ".json"
    members = {
        config_name: blob,
        "manifest.json": json.dumps(
            [
                {
                    "Config": config_name,
                    "RepoTags": ["envkit-cpu:0123456789ab"],
                    "Layers": [f"l{i}/layer.tar" for i in range(len(layers))],
                }
            ]
        ).encode(),
    }
    members.update({f"l{i}/layer.tar": layer for i, layer in enumerate(layers)})
    path.write_bytes(gzip.compress(tar_bytes(members), mtime=0))
    return path


def test_saved_tarball_applies_layers_and_whiteouts(tmp_path):
    lower = tar_bytes({**filesystem(), "etc/app/a.conf": b"a", "etc/app/b.conf": b"b", "tmp/junk": b"j"})
    upper = tar_bytes(
        {
            f"{SITE}/.wh.tqdm-4.67.1.dist-info": b"",
            **dist("tqdm", "4.70.1"),
            "etc/app/.wh..wh..opq": b"",
            "etc/app/c.conf": b"c",
            "tmp/.wh.junk": b"",
        }
    )
    config = {
        "config": {
            "Env": ["PATH=/usr/bin", "ENVKIT_LOCK_SHA256=ff"],
            "Labels": {"org.opencontainers.image.base.digest": "sha256:aa"},
        }
    }
    found = inventory.from_saved_tarball(saved_image(tmp_path / "img.tar.gz", [lower, upper], config))
    assert found.python == {"torch": "2.13.0+cpu", "tqdm": "4.70.1"}
    assert not [p for p in found.files if p.startswith(f"{SITE}/tqdm-4.67.1")]
    assert sorted(p for p in found.files if p.startswith("etc/app/")) == ["etc/app/c.conf"]
    assert "tmp/junk" not in found.files
    assert found.env["ENVKIT_LOCK_SHA256"] == "ff" and found.versions["lock_sha256"] == "ff"
    assert found.image_id == "sha256:" + hashlib.sha256(json.dumps(config).encode()).hexdigest()


def test_a_later_layer_replaces_directories_and_files_whole(tmp_path):
    lower = tar_bytes({**filesystem(), "opt/tool/bin/run": b"r", "opt/tool/lib/x": b"x", "srv/data": b"d"})
    # opt/tool becomes a file, srv/data a directory; a hard link takes its target's content
    upper = tar_bytes({"opt/tool": b"now a file", "srv/data": None, "srv/data/inner": b"i"})
    buffer = io.BytesIO(upper)
    with tarfile.open(fileobj=buffer, mode="a") as archive:
        info = tarfile.TarInfo("srv/copy")
        info.type, info.linkname = tarfile.LNKTYPE, "srv/data/inner"
        archive.addfile(info)
    found = inventory.from_saved_tarball(
        saved_image(tmp_path / "img.tar.gz", [lower, buffer.getvalue()], {"config": {}})
    )
    assert not [p for p in found.files if p.startswith("opt/tool/")]
    assert found.files["opt/tool"] == hashlib.sha256(b"now a file").hexdigest()
    assert found.files["srv/data/inner"] == found.files["srv/copy"] == hashlib.sha256(b"i").hexdigest()
    assert "srv/data" not in found.files and found.python == {"torch": "2.13.0+cpu", "tqdm": "4.67.1"}


def test_a_file_that_is_not_a_saved_image_is_one_line(tmp_path):
    bogus = tmp_path / "x.tar.gz"
    bogus.write_bytes(gzip.compress(b"not a tar"))
    with pytest.raises(EnvkitError, match="not a readable 'docker save' tarball"):
        inventory.from_saved_tarball(bogus)


RESULTS = DATA / "results" / "mixed" / "mnist-cpu-b.json"


def results(tmp_path: Path, name: str, distributions: list[str], **environment) -> Path:
    """A valid results file of the current version (the report's test data, upgraded) with these distributions
    and environment fields."""
    document, _ = upgrade(json.loads(RESULTS.read_text()))
    document["environment"].update(
        {"torch": "2.9.0", "python": "3.11.7", "distributions": distributions, **environment}
    )
    path = tmp_path / name
    path.write_text(json.dumps(document))
    return path


def test_diff_of_two_results_names_the_package_and_the_lock(tmp_path):
    a = results_inventory(results(tmp_path, "a.json", ["numpy==2.3.5", "torch==2.9.0"], lock_sha256="1" * 64))
    b = results_inventory(
        results(tmp_path, "b.json", ["numpy==2.4.6", "torch==2.9.0", "tpu-info==0.14.2"], lock_sha256="2" * 64)
    )
    sections = {s.title: s for s in env_diff.compare(a, b)}
    assert sections["python packages"].changes == ("numpy: 2.3.5 -> 2.4.6", "+ tpu-info 0.14.2 (only in B)")
    assert sections["versions"].changes == (f"lock_sha256: {'1' * 64} -> {'2' * 64}",)
    assert sections["apt packages"].unknown == "not recorded by A or B"


def test_a_host_run_and_an_image_run_of_one_lock_differ_only_where_they_really_do(tmp_path):
    """The host's venv (envkit venv) and the image install the same lock; each venv has its own
    Python's pip, and the image's Python is its base's patch release."""
    locked = ["filelock==4.2.12", "torch==2.9.0", "triton==3.5.0"]
    host = results(
        tmp_path,
        "host.json",
        [*locked, "pip==23.2.1", "setuptools==65.5.0"],
        lock_sha256="ab" * 32,
        torch_cuda_build="12.8",
        image=None,
        image_id=None,
    )
    image = results(
        tmp_path,
        "image.json",
        [*locked, "pip==24.0", "setuptools==65.5.0"],
        lock_sha256="ab" * 32,
        torch_cuda_build="12.8",
        python="3.11.2",
        image="envkit-cuda:latest",
        image_id="sha256:" + "cd" * 32,
    )
    sections = {s.title: s for s in env_diff.compare(results_inventory(host), results_inventory(image))}
    assert sections["versions"].changes == ("python: 3.11.7 -> 3.11.2",)
    assert sections["python packages"].changes == ("pip: 23.2.1 -> 24.0",)


def test_a_results_files_cuda_is_the_one_its_torch_was_built_for(tmp_path):
    found = results_inventory(results(tmp_path, "a.json", ["torch==2.9.0"], torch_cuda_build="12.6"))
    assert found.versions["cuda"] == "12.6"


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "envkit", *args], cwd=cwd, capture_output=True, text=True)


def test_diff_command_exit_codes(tmp_path):
    a = results(tmp_path, "a.json", ["torch==2.9.0"])
    same = run_cli("diff", str(a), str(a), cwd=tmp_path)
    assert same.returncode == 0, same.stderr
    assert "python packages: same (1)" in same.stdout
    other = run_cli("diff", str(a), str(results(tmp_path, "b.json", ["torch==2.9.1"])), cwd=tmp_path)
    assert other.returncode == 1
    assert "  torch: 2.9.0 -> 2.9.1" in other.stdout


def test_diff_of_results_without_distributions_says_none_were_recorded(tmp_path):
    """Issue 28 §23: two results that record no distributions were `python packages: same (0)`."""
    a = results(tmp_path, "a.json", [])
    done = run_cli("diff", str(a), str(a), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "python packages: none recorded on either side" in done.stdout.splitlines()


def test_diff_reads_results_as_strictly_as_report(tmp_path):
    newer = json.loads(results(tmp_path, "a.json", ["torch==2.9.0"]).read_text())
    (tmp_path / "newer.json").write_text(json.dumps(dict(newer, schema_version=999)))
    done = run_cli("diff", "a.json", "newer.json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stderr == (
        f"envkit: warning: newer.json: schema_version 999 is newer than this envkit reads ({SCHEMA_VERSION}); "
        "using the fields it knows\n"
    )
    (tmp_path / "list.json").write_text("[1, 2]")
    done = run_cli("diff", "a.json", "list.json", cwd=tmp_path)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == "envkit: error: list.json is not a results file envkit reads: not a results object\n"
    (tmp_path / "no-timing.json").write_text(json.dumps({k: v for k, v in newer.items() if k != "timing"}))
    done = run_cli("diff", "a.json", "no-timing.json", cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "'timing' is a required property" in done.stderr


@pytest.mark.parametrize("missing", ["/tmp/x/nope.json", "nope.json", "./images/envkit-cpu", "old.tar.gz"])
def test_diff_of_a_missing_file_says_so_not_docker(tmp_path, missing):
    a = results(tmp_path, "a.json", ["torch==2.9.0"])
    done = run_cli("diff", missing, str(a), cwd=tmp_path)
    assert (done.returncode, done.stdout) == (2, "")
    assert (
        done.stderr.startswith(f"envkit: error: {missing}: no such file; A and B are each")
        and done.stderr.count("\n") == 1
    )


def test_diff_of_a_tampered_saved_image_is_refused(tmp_path):
    tarball = saved_image(tmp_path / "envkit-cpu-0123456789ab.tar.gz", [tar_bytes(filesystem())], {"config": {}})
    manifest = {
        "manifest_version": 1,
        "tag": "envkit-cpu:0123456789ab",
        "image_id": "sha256:x",
        "tarball": tarball.name,
        "sha256": "0" * 64,
        "size": tarball.stat().st_size,
        "pins": {},
    }
    (tmp_path / "envkit-cpu-0123456789ab.manifest.json").write_text(json.dumps(manifest))
    done = run_cli("diff", str(tarball), str(tarball), cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "does not match the manifest" in done.stderr


def found_image(tqdm_record: str, pyc: bytes) -> inventory.Inventory:
    files = filesystem({**dist("tqdm", "4.67.1", tqdm_record), "usr/lib/x.pyc": pyc})
    return inventory.from_filesystem_tar(io.BytesIO(tar_bytes(files)), "img")


def test_verify_without_identical_digests_needs_the_same_packages_and_no_file_differing():
    same = verify.judge(found_image("r", b"1"), found_image("r", b"1"))
    assert same.reproduced and same.format().endswith("files: 0 of 7 differ in content\nreproduced")
    one_file = verify.judge(found_image("r", b"1"), found_image("r", b"2"))
    assert not one_file.reproduced and one_file.files_differ == ["usr/lib/x.pyc"]
    assert one_file.format().endswith(
        "files: 1 of 7 differ in content\n  usr/lib/x.pyc\nnot reproduced: 1 files differ in content"
    )
    changed = verify.judge(found_image("r", b"1"), found_image("other", b"1"))
    assert not changed.reproduced
    assert changed.package_changes == ("python tqdm 4.67.1: installed files differ (RECORD)",)
    assert changed.format().endswith("not reproduced: 1 package differences, 1 files differ in content")  # its RECORD


def test_verify_with_identical_digests_reads_nothing_else():
    digest = "sha256:" + "ab" * 32
    verdict = verify.Verdict("envkit-cpu:0123456789ab (sha256:11)", "envkit-cpu:verify (sha256:11)", (digest, digest))
    assert verdict.reproduced and verdict.format().splitlines()[-2:] == [f"identical: {digest}", "reproduced"]
    # Digests that differ are said, and the inventories then decide.
    other = "sha256:" + "cd" * 32
    differs = verify.judge(found_image("r", b"1"), found_image("r", b"1"), digests=(digest, other))
    assert differs.reproduced and f"digests differ: {digest} (current), {other} (rebuilt)" in differs.format()
