"""The project's facts: envkit.yaml's config, the version matrix, the kinds, the experiments table, and the loader of
envkit/data/.

Import-light on purpose: `envkit render` must not pay for what other commands need.
"""

from pathlib import Path

# Here rather than in load.py: the CLI names the default without loading YAML.
DEFAULT_CONFIG = Path("envkit.yaml")
# A notebook target's folder beside the config: notebooks/<target>/ holds its lock and its committed notebooks.
NOTEBOOKS = Path("notebooks")
# The image targets' rendered files beside the config: docker/<target>/.
RENDERED = Path("docker")
