"""`envkit verify TARGET` and `envkit diff A B`: is this environment the one I think it is?"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from envkit.cli.options import add_build_inputs, add_config, build_options, load_target


def register(subparsers) -> None:
    verify = subparsers.add_parser(
        "verify",
        help="rebuild a target with --no-cache and compare it with its current image",
        description="Exit 0 and print 'reproduced' when the rebuild is the same: 'identical: sha256:...' when the "
        "builder gives identical manifest digests (buildah), else the same Python distributions (name, "
        "version, RECORD hash), dpkg packages and 0 files differing in content. Exit 1 with what "
        "differs otherwise.",
    )
    verify.add_argument("target", help="target name from the config, e.g. cpu")
    add_build_inputs(verify, builder_default=None)
    add_config(verify)
    verify.set_defaults(func=cmd_verify)

    diff = subparsers.add_parser(
        "diff",
        help="what differs between two environments (images, saved tarballs or results JSON)",
        description="A and B are each an image in the engine (a reference, or a target name for its latest build), "
        "a saved image (.tar.gz or its .manifest.json from 'envkit save') or a results .json. "
        "Exit 0 when nothing differs, 1 when something does.",
    )
    diff.add_argument("a")
    diff.add_argument("b")
    add_config(diff)
    diff.set_defaults(func=cmd_diff)


def cmd_verify(args) -> int:
    from envkit.image.verify import verify

    config, target = load_target(args)
    verdict = verify(config.root, target, build_options(args, no_cache=True), args.builder)
    print(verdict.format())
    return 0 if verdict.reproduced else 1


# What a file argument looks like: an image reference never starts like a path or ends like a file.
FILE_PREFIXES = ("/", "./", "../", "~")
FILE_SUFFIXES = (".json", ".tar.gz", ".tgz", ".tar")
SIDES = "A and B are each an image in the engine, a saved .tar.gz or its .manifest.json, or a results .json"


def _inventory(text: str, config_path: Path):
    from envkit.errors import EnvkitError
    from envkit.image import archive as image_archive
    from envkit.image import inventory
    from envkit.image.build import LATEST, repository
    from envkit.support.docker_client import connect_docker

    path = Path(text).expanduser()
    if path.is_dir():
        raise EnvkitError(f"{text} is a directory; {SIDES}")
    if path.is_file():
        if text.endswith(".json") and not text.endswith(".manifest.json"):
            from envkit.runs.environment import results_inventory  # jsonschema: only when a results file is compared

            return results_inventory(path)
        if text.endswith((".manifest.json", ".tar.gz")):
            # Through the manifest, so a tarball altered since `envkit save` is refused.
            manifest_path = image_archive.manifest_for(path)
            return inventory.from_saved_tarball(
                image_archive.verify_tarball(manifest_path, image_archive.read_manifest(manifest_path))
            )
        raise EnvkitError(f"{text} is a file envkit cannot compare; {SIDES}")
    if path.is_symlink() or path.exists():  # something stands there, but not a file envkit reads
        raise EnvkitError(f"{_not_a_file(path, text)}; {SIDES}")
    if text.startswith(FILE_PREFIXES) or text.endswith(FILE_SUFFIXES):
        raise EnvkitError(f"{text}: no such file; {SIDES}")
    reference = text
    if ":" not in text and "/" not in text and config_path.is_file():
        from envkit.project.load import load_config

        if text in load_config(config_path).targets:
            reference = f"{repository(text)}:{LATEST}"
    return inventory.from_engine_image(connect_docker(), reference)


def _not_a_file(path: Path, text: str) -> str:
    """What stands at ``path`` (a FIFO, a device, a symlink loop or a dangling one), in words."""
    from envkit.support.bounded_load import Refused, open_regular

    try:
        open_regular(path).close()
    except Refused as exc:
        return exc.at(text)
    except FileNotFoundError:
        return f"{text}: a symlink to {os.readlink(path)}, which does not exist"
    except OSError as exc:
        return f"{text}: cannot read: {exc.strerror or exc}"
    return f"{text}: changed while envkit looked at it"


def cmd_diff(args) -> int:
    from envkit.image.diff import compare, format_sections
    from envkit.image.inventory import side_by_side

    a, b = side_by_side(lambda: _inventory(args.a, args.config), lambda: _inventory(args.b, args.config))
    for note in a.notes + b.notes:
        print(f"envkit: warning: {note}", file=sys.stderr)
    sections = compare(a, b)
    sys.stdout.write(format_sections(sections, a, b) + "\n")
    return 1 if any(section.differs for section in sections) else 0
