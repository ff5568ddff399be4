"""Where envkit's own templates are, in one small module: the notebooks' embedded report (the HTML page's
template) finds them without importing the renderer and the modules it needs."""

from __future__ import annotations

from pathlib import Path


def packaged_templates() -> Path:
    """envkit's own templates: envkit/templates/ in an installed wheel (setup.py puts them there), else the
    checkout's templates/ beside the envkit package (a source tree, an editable install, or a notebook's
    embedded report/ folder)."""
    package = Path(__file__).resolve().parents[1]
    installed = package / "templates"
    return installed if installed.is_dir() else package.parent / "templates"
