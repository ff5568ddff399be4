"""Locks: the lock file, resolving it with uv, checking the matrix against the index, base image digests.

Import-light on purpose: `envkit render` must not pay for what other commands need."""
