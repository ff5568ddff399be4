"""Small shared helpers: atomic writes, the cache directory, shell quoting, the Docker client.

Import-light on purpose: `envkit render` must not pay for what other commands need."""
