"""What secret an archive among the project's files holds: a zip or a tar (plain, gzip, bzip2, xz) is opened
and each member looked at as a file is (envkit.project.secrets: by name, then by content), since an image or a
notebook publishes the archive and with it every key zipped into it.

Bounded: an archive of more than ``MAX_MEMBERS`` members or ``MAX_UNPACKED`` bytes unpacked is not looked
into, and counts as a secret itself (the line that names it says why; listing it under include_secrets
carries it): a decompression bomb, or a data set that belongs in ENVKIT_DATA_DIR. An archive inside an
archive is read as bytes, not opened in turn.
"""

from __future__ import annotations

import lzma
import tarfile
import zipfile
import zlib
from typing import BinaryIO

from envkit.project import secrets

ARCHIVE_SUFFIXES = (".zip", ".tar", ".tgz", ".tar.gz", ".tbz2", ".tar.bz2", ".txz", ".tar.xz")
MAX_MEMBERS = 10_000
MAX_UNPACKED = 256_000_000
# Zip's bit 0: the member is encrypted, its bytes are ciphertext (its name is still read).
_ENCRYPTED = 0x1


def in_archive(name: str, stream: BinaryIO) -> str | None:
    """What secret the archive file ``name`` (open as ``stream``) holds; None when it holds none, or its name is
    no archive's, or it is not one after all (its bytes have been read as a file's)."""
    if not name.lower().endswith(ARCHIVE_SUFFIXES):
        return None
    stream.seek(0)
    try:
        return _in_zip(stream) if name.lower().endswith(".zip") else _in_tar(stream)
    except (zipfile.BadZipFile, tarfile.TarError, EOFError, zlib.error, lzma.LZMAError):
        return None


def _in_zip(stream: BinaryIO) -> str | None:
    with zipfile.ZipFile(stream) as archive:
        members = [info for info in archive.infolist() if not info.is_dir()]
        # A member reads no more than the size its entry declares, so the sum bounds what is read.
        if len(members) > MAX_MEMBERS or sum(info.file_size for info in members) > MAX_UNPACKED:
            return _too_large()
        for info in members:
            why = secrets.by_name(info.filename)
            if why is None and not info.flag_bits & _ENCRYPTED:
                with archive.open(info) as member:
                    why = secrets.in_stream(member)
            if why is not None:
                return f"holds {info.filename} ({why})"
    return None


def _in_tar(stream: BinaryIO) -> str | None:
    unpacked = 0
    # As a stream ("r|*"): a compressed tar is unpacked once, member after member, never listed first.
    with tarfile.open(fileobj=stream, mode="r|*") as archive:
        for count, info in enumerate(archive, 1):
            unpacked += info.size
            if count > MAX_MEMBERS or unpacked > MAX_UNPACKED:
                return _too_large()
            why = secrets.by_name(info.name)
            if why is None and info.isfile():
                why = secrets.in_stream(archive.extractfile(info))
            if why is not None:
                return f"holds {info.name} ({why})"
    return None


def _too_large() -> str:
    return (
        f"an archive too large to look inside for secrets (over {MAX_MEMBERS:,} members or "
        f"{MAX_UNPACKED // 1_000_000} MB unpacked)"
    )
