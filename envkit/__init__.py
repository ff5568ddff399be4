"""envkit: reproducible deep-learning hardware comparisons.

Kept import-light on purpose: the CLI must start without torch, the Docker SDK
or matplotlib; each command imports what it needs when it runs.
"""

__version__ = "0.1.0"
# The distribution's name on the package index (pyproject.toml's [project] name), which every install hint
# names: "envkit" there is another project. The import and the command stay envkit.
DISTRIBUTION = "envkit-hw"
