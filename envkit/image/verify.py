"""`envkit verify TARGET`: rebuild from scratch and prove the environment is the same.

The current image and a `--no-cache` rebuild of the same inputs are compared by their
inventories: Python distributions (name, version and the hash of their RECORD, which
lists every installed file with its hash), dpkg packages and versions, and every
file's content digest (mtimes ignored). Packages decide the verdict; files that
still differ (timestamps baked into bytecode, caches) are counted and named.
"""

from __future__ import annotations

from dataclasses import dataclass

from envkit.image.diff import dict_changes, file_changes, record_changes
from envkit.errors import EnvkitError
from envkit.image.inventory import Inventory, from_engine_image

# The differing files a report names before it only counts them.
FILES_SHOWN = 20


@dataclass(frozen=True)
class Verdict:
    current: Inventory
    rebuilt: Inventory
    package_changes: tuple[str, ...]
    files_differ: list[str]

    @property
    def reproduced(self) -> bool:
        return not self.package_changes

    def format(self) -> str:
        a, b = self.current, self.rebuilt
        lines = [f"current: {a.source} ({a.image_id})", f"rebuilt: {b.source} ({b.image_id}, --no-cache)",
                 f"python distributions: {len(a.python or {})} in the current image, {len(b.python or {})} rebuilt",
                 f"dpkg packages: {len(a.dpkg or {})} in the current image, {len(b.dpkg or {})} rebuilt"]
        lines += [f"  {change}" for change in self.package_changes]
        total = len(set(a.files or {}) | set(b.files or {}))
        lines.append(f"files: {len(self.files_differ)} of {total} differ in content")
        lines += [f"  {path}" for path in self.files_differ[:FILES_SHOWN]]
        if len(self.files_differ) > FILES_SHOWN:
            lines.append(f"  ... and {len(self.files_differ) - FILES_SHOWN} more")
        lines.append("reproduced" if self.reproduced else f"not reproduced: {len(self.package_changes)} package differences")
        return "\n".join(lines)


def judge(current: Inventory, rebuilt: Inventory) -> Verdict:
    changes = (tuple(f"python {c}" for c in dict_changes(current.python or {}, rebuilt.python or {}))
               + tuple(f"python {c}" for c in record_changes(current, rebuilt))
               + tuple(f"dpkg {c}" for c in dict_changes(current.dpkg or {}, rebuilt.dpkg or {})))
    return Verdict(current, rebuilt, changes, file_changes(current, rebuilt))


def verify(root, target, options) -> Verdict:
    from envkit.support.docker_client import connect_docker
    from envkit.image.build import rebuild_as, repository, resolve_image

    client = connect_docker()
    current, content_tag = resolve_image(client, target.name)
    scratch = f"{repository(target.name)}:verify"
    rebuilt_tag, rebuilt = rebuild_as(root, target, options, scratch)
    try:
        if rebuilt_tag != content_tag:
            raise EnvkitError(
                f"{content_tag} was built from other inputs than these (they give {rebuilt_tag}): "
                "pass the same --base-image, --wheelhouse, --ca-cert and --build-arg as its build")
        return judge(from_engine_image(client, current.id), from_engine_image(client, rebuilt.id))
    finally:
        client.images.remove(scratch, noprune=False)
