"""envkit: reproducible deep-learning hardware comparisons.

Kept import-light on purpose: the CLI must start without torch, the Docker SDK
or matplotlib; each command imports what it needs when it runs.
"""

__version__ = "0.1.0"
