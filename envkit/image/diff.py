"""What differs between two environments: the answer to "why don't our numbers match?".

Both sides are inventories (envkit.image.inventory): images, saved tarballs or results JSON.
Each comparison is a titled section; a category one side does not record is said to be
unknown rather than silently equal.
"""

from __future__ import annotations

from dataclasses import dataclass

from envkit.image.inventory import Inventory
from envkit.render.labels import BASE_DIGEST_LABEL


@dataclass(frozen=True)
class Section:
    title: str
    changes: tuple[str, ...]  # one line per difference; empty when the two sides agree
    compared: int = 0  # how many entries were compared
    unknown: str | None = None  # why this category could not be compared

    @property
    def differs(self) -> bool:
        return bool(self.changes)


def dict_changes(a: dict[str, str | None], b: dict[str, str | None]) -> tuple[str, ...]:
    lines = []
    for key in sorted(set(a) | set(b)):
        left, right = a.get(key), b.get(key)
        if left == right:
            continue
        if key not in b or right is None:
            lines.append(f"- {key} {left} (only in A)")
        elif key not in a or left is None:
            lines.append(f"+ {key} {right} (only in B)")
        else:
            lines.append(f"{key}: {left} -> {right}")
    return tuple(lines)


def _section(title: str, a, b, a_name: str, b_name: str) -> Section:
    missing = [name for name, side in ((a_name, a), (b_name, b)) if side is None]
    if missing:
        return Section(title, (), unknown=f"not recorded by {' or '.join(missing)}")
    return Section(title, dict_changes(a, b), compared=len(set(a) | set(b)))


def _base_digest(inventory: Inventory) -> dict[str, str | None] | None:
    if inventory.labels is None:
        return None
    return {"base": inventory.labels.get(BASE_DIGEST_LABEL)}


def compare(a: Inventory, b: Inventory) -> list[Section]:
    """The sections `envkit diff` prints, in the order a reader asks about them."""
    versions_a = {k: v for k, v in a.versions.items() if v is not None}
    versions_b = {k: v for k, v in b.versions.items() if v is not None}
    return [
        _section("versions", versions_a, versions_b, "A", "B"),
        _section("python packages", a.python, b.python, "A", "B"),
        _section("apt packages", a.dpkg, b.dpkg, "A", "B"),
        _section("base digest", _base_digest(a), _base_digest(b), "A", "B"),
        _section("environment variables", a.env, b.env, "A", "B"),
        _section("labels", a.labels, b.labels, "A", "B"),
    ]


def record_changes(a: Inventory, b: Inventory) -> tuple[str, ...]:
    """Distributions of one version whose installed files differ (their RECORD hashes)."""
    records_a, records_b = a.python_records or {}, b.python_records or {}
    same_version = sorted(
        n for n in set(records_a) & set(records_b) if (a.python or {}).get(n) == (b.python or {}).get(n)
    )
    return tuple(
        f"{name} {(a.python or {})[name]}: installed files differ (RECORD)"
        for name in same_version
        if records_a[name] != records_b[name]
    )


def file_changes(a: Inventory, b: Inventory) -> list[str]:
    """Paths whose content (or link target) differs, or that only one side has."""
    files_a, files_b = a.files or {}, b.files or {}
    return sorted(p for p in set(files_a) | set(files_b) if files_a.get(p) != files_b.get(p))


def format_sections(sections: list[Section], a: Inventory, b: Inventory) -> str:
    lines = [
        f"A: {a.source}" + (f" ({a.image_id})" if a.image_id else ""),
        f"B: {b.source}" + (f" ({b.image_id})" if b.image_id else ""),
    ]
    for section in sections:
        if section.unknown:
            lines.append(f"{section.title}: {section.unknown}")
        elif section.differs:
            lines.append(f"{section.title}: {len(section.changes)} of {section.compared} differ")
            lines += [f"  {change}" for change in section.changes]
        elif section.compared:
            lines.append(f"{section.title}: same ({section.compared})")
        else:  # "same (0)" read as a match of two empty lists
            lines.append(f"{section.title}: none recorded on either side")
    return "\n".join(lines)
