"""What this host offers: doctor's facts and the training probe.

Import-light on purpose: `envkit render` must not pay for what other commands need."""
