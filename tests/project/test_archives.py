"""envkit.project.archives: what secret an archive among the project's files holds, looked at within bounds."""

from __future__ import annotations

import io
import tarfile
import zipfile

from envkit.project import archives
from envkit.project.archives import in_archive

KEY = "-----BEGIN " + "RSA PRIVATE KEY-----\nMIIB\n-----END RSA PRIVATE KEY-----\n"  # put together: no real key


def _tar(mode: str, members: dict[str, bytes]) -> io.BytesIO:
    stream = io.BytesIO()
    with tarfile.open(fileobj=stream, mode=mode) as archive:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return stream


def _zip(members: dict[str, bytes]) -> io.BytesIO:
    stream = io.BytesIO()
    with zipfile.ZipFile(stream, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return stream


def test_a_member_named_or_holding_a_secret_is_named_in_every_kind_of_archive():
    for name, mode in (
        ("a.tar", "w"),
        ("a.tgz", "w:gz"),
        ("a.tar.gz", "w:gz"),
        ("a.tar.bz2", "w:bz2"),
        ("a.txz", "w:xz"),
    ):
        assert in_archive(name, _tar(mode, {"src/m.py": b"x\n", "home/.netrc.bak": b"x\n"})) == (
            "holds home/.netrc.bak (named .netrc (a backup or copy))"
        )
        assert in_archive(name, _tar(mode, {"notes/key.txt": KEY.encode("utf-16")})) == (
            "holds notes/key.txt (holds a private key)"
        )
        assert in_archive(name, _tar(mode, {"src/m.py": b"x\n"})) is None
    assert in_archive("a.zip", _zip({"src/m.py": b"x\n", "conf/.env": b"A=1\n"})) == "holds conf/.env (named .env)"
    assert in_archive("A.ZIP", _zip({"k": KEY.encode()})) == "holds k (holds a private key)"


def test_a_file_that_is_not_an_archive_or_not_named_as_one_is_not_opened():
    assert in_archive("data.zip", io.BytesIO(b"not a zip")) is None
    assert in_archive("data.tgz", io.BytesIO(b"not a tar")) is None
    assert in_archive("data.bin", _zip({"id_rsa": b"x\n"})) is None  # a file's bytes are read as they are


def test_an_archive_past_the_bounds_is_a_secret_itself_without_being_unpacked(monkeypatch):
    """A decompression bomb, or a data set: envkit does not read it to its end, and names it instead."""
    monkeypatch.setattr(archives, "MAX_MEMBERS", 3)
    monkeypatch.setattr(archives, "MAX_UNPACKED", 1000)
    many = {f"f{index}.txt": b"x\n" for index in range(4)}
    large = {"big.bin": b"\0" * 1001}
    for name, stream in (("m.zip", _zip(many)), ("m.tgz", _tar("w:gz", many)), ("l.zip", _zip(large))):
        why = in_archive(name, stream)
        assert why == "an archive too large to look inside for secrets (over 3 members or 0 MB unpacked)"
    assert in_archive("l.tar", _tar("w", large)).startswith("an archive too large")
    assert in_archive("ok.tar", _tar("w", {"f.txt": b"x" * 1000})) is None
