"""Images: the build context, building, saving and loading, pruning, inventories, diff and verify.

Import-light on purpose: `envkit render` must not pay for what other commands need."""

# The builders `envkit build --builder` offers; the first is the default. Each makes other
# image bytes from one context, so a builder other than the default enters the content tag.
BUILDERS = ("docker", "buildah")
