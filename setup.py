"""The one build step pyproject.toml cannot say: templates/ (at the top of the repository, where the
design card keeps it) goes into the wheel as envkit/templates/, so an installed envkit renders anywhere.

An editable install keeps reading templates/ from the checkout (envkit.support.packaged finds either).
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

TEMPLATES = Path(__file__).resolve().parent / "templates"


class BuildWithTemplates(build_py):
    def run(self):
        super().run()
        if not self.editable_mode:
            target = Path(self.build_lib) / "envkit" / "templates"
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(TEMPLATES, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


setup(cmdclass={"build_py": BuildWithTemplates})
