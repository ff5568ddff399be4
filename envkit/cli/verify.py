"""`envkit verify TARGET` and `envkit diff A B`: is this environment the one I think it is?"""

from __future__ import annotations

import sys
from pathlib import Path

from envkit.cli.options import add_build_inputs, add_config, build_options, load_target


def register(subparsers) -> None:
    verify = subparsers.add_parser(
        "verify", help="rebuild a target with --no-cache and compare it with its current image",
        description="Exit 0 and print 'reproduced' when every Python distribution (name, version, RECORD hash) and "
                    "dpkg package is the same; exit 1 with the differences otherwise. Differing files are counted.")
    verify.add_argument("target", help="target name from the config, e.g. cpu")
    add_build_inputs(verify)
    add_config(verify)
    verify.set_defaults(func=cmd_verify)

    diff = subparsers.add_parser(
        "diff", help="what differs between two environments (images, saved tarballs or results JSON)",
        description="A and B are each an image in the engine (a reference, or a target name for its latest build), "
                    "a saved image (.tar.gz or its .manifest.json from 'envkit save') or a results .json. "
                    "Exit 0 when nothing differs, 1 when something does.")
    diff.add_argument("a")
    diff.add_argument("b")
    add_config(diff)
    diff.set_defaults(func=cmd_diff)


def cmd_verify(args) -> int:
    from envkit.image.verify import verify

    config, target = load_target(args)
    verdict = verify(config.root, target, build_options(args, no_cache=True))
    print(verdict.format())
    return 0 if verdict.reproduced else 1


def _inventory(text: str, config_path: Path):
    from envkit.image import archive as image_archive
    from envkit.image import inventory
    from envkit.support.docker_client import connect_docker
    from envkit.image.build import LATEST, repository

    path = Path(text)
    if path.is_file() and text.endswith(".json") and not text.endswith(".manifest.json"):
        return inventory.from_results(path)
    if path.is_file() and (text.endswith(".manifest.json") or text.endswith(".tar.gz")):
        # Through the manifest, so a tarball altered since `envkit save` is refused.
        manifest_path = image_archive.manifest_for(path)
        return inventory.from_saved_tarball(image_archive.verify_tarball(manifest_path, image_archive.read_manifest(manifest_path)))
    reference = text
    if ":" not in text and "/" not in text and config_path.is_file():
        from envkit.project.config import load_config

        if text in load_config(config_path).targets:
            reference = f"{repository(text)}:{LATEST}"
    return inventory.from_engine_image(connect_docker(), reference)


def cmd_diff(args) -> int:
    from envkit.image.diff import compare, format_sections

    a, b = _inventory(args.a, args.config), _inventory(args.b, args.config)
    sections = compare(a, b)
    sys.stdout.write(format_sections(sections, a, b) + "\n")
    return 1 if any(section.differs for section in sections) else 0
