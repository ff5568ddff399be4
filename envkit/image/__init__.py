"""Images: the build context, building, saving and loading, pruning, inventories, diff and verify.

Import-light on purpose: `envkit render` must not pay for what other commands need."""
