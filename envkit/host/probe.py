"""`envkit doctor --probe [--image TARGET]`: run recipes/probe.py here, or inside a target's image.

The probe itself is a recipe (it runs inside images, where envkit is not
installed); this module only finds it and says how to run it. In an image it
goes through the target's rendered run.sh like every recipe (`envkit run`), so
devices, mounts and TPU flags are the ones a real run gets.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from envkit.errors import EnvkitError

RECIPE = "probe"


def recipe_args(as_json: bool) -> list[str]:
    return ["--json"] if as_json else []


def probe_script(root: Path) -> Path:
    """The probe recipe of the project at ``root``, here or in its image; one line when the project has none."""
    script = root / "recipes" / f"{RECIPE}.py"
    if not script.is_file():
        raise EnvkitError(f"no {script}: run the probe from the project directory (beside recipes/), or pass --config")
    return script


def probe_here(root: Path, as_json: bool) -> int:
    """Run the probe with this interpreter; its exit status (1: a device failed)."""
    return subprocess.run([sys.executable, str(probe_script(root)), *recipe_args(as_json)], check=False).returncode
