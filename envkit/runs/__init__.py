"""Runs: experiment plans, the results files, the report and its plot.

Import-light on purpose: `envkit render` must not pay for what other commands need."""
