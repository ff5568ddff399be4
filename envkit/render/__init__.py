"""Rendering docker/<target>/ from the config, the lock and templates/.

Import-light on purpose: `envkit render` must not pay for what other commands need."""
