"""Image labels envkit writes and reads back (render writes them, inventory and diff read them)."""

LOCK_LABEL = "io.envkit.lock.sha256"
BASE_DIGEST_LABEL = "org.opencontainers.image.base.digest"
