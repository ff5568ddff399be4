"""`envkit render --check`: which targets' committed files differ from a fresh render, and what `render --all`
removes."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from envkit.render import output as rendered


@dataclass(frozen=True)
class Output:
    """One folder's fresh render: the image folder for the image targets, the notebook folder for the notebook ones."""

    folder: Path
    names: list[str]
    files: list[rendered.RenderedFile]


@dataclass(frozen=True)
class Report:
    lines: list[str]  # one per target (up to date or why not), then one per removed target or unlisted file
    stale: list[str]  # the targets whose files differ
    orphans: int  # folders of targets no longer in the config
    unlisted: int  # files in a target's folder that no render writes any more

    def problem(self) -> str | None:
        """What is stale, for the one error line; None when everything is up to date."""
        what = self.stale + [f"{self.orphans} removed target(s)"] * bool(self.orphans)
        what += [f"{self.unlisted} unlisted notebook(s)"] * bool(self.unlisted)
        return ", ".join(what) or None


def check(outputs: list[Output], *, whole: bool, unlisted: list[str] = ()) -> Report:
    """Compare each output with the disk; with ``whole`` (a render of every target) also report removed targets.

    ``unlisted`` are the lines for files no render writes any more (envkit.notebook.committed.orphans).
    """
    lines, stale = [], []
    for output in outputs:
        for name in output.names:
            problems = rendered.stale(output.folder, [file for file in output.files if file.path.parts[0] == name])
            lines.append(
                f"{name}: {'; '.join(problems)}" if problems else f"{name}: up to date ({output.folder / name})"
            )
            stale += [name] if problems else []
    orphans = [line for output in outputs for line in rendered.orphans(output.folder, output.names)] if whole else []
    return Report(lines + orphans + list(unlisted), stale, len(orphans), len(unlisted))
