"""Which of the config's targets runs an experiment: the one home of that rule.

An experiment names the targets it runs on (``targets:``, the default first), or, the seed form,
a kind whose every target it fits. `envkit experiment`, `envkit launch` and its engines run it on an
image target; `envkit notebook` and Kaggle on a notebook target. Each asks here, and gets the
experiment as it runs there (that target's kind and GPU rule), so its records name both.
"""

from __future__ import annotations

from envkit.errors import EnvkitError
from envkit.project.experiments import Experiment

# Where a run takes place: an image (docker/<target>/) or a notebook platform.
IMAGE, NOTEBOOK = "image", "notebook"


def place(config, entry: Experiment, name: str | None, where: str = IMAGE, platform: str | None = None):
    """(the experiment on its target, the target): ``name`` if given (it must be one the experiment runs on),
    else the first of the experiment's targets that is an image (a notebook of ``platform``), else the one
    target of its kind. ``config``: a ProjectConfig. Bad choices are one line."""
    target = (
        _named(config, entry, name, where, platform) if name is not None else _default(config, entry, where, platform)
    )
    return entry.on(target), target


def _named(config, entry: Experiment, name: str, where: str, platform: str | None):
    target = config.target(name)
    if where == IMAGE and target.is_notebook:
        raise EnvkitError(
            f"target {name!r} is a notebook target ({target.platform}), not an image: "
            f"envkit notebook {entry.name} --target {name}, or envkit launch {entry.name} --on {target.platform}"
        )
    if where == NOTEBOOK and not target.is_notebook:
        others = [t.name for t in config.targets.values() if t.is_notebook and entry.fits(t)]
        raise EnvkitError(
            f"target {name!r} is not a notebook target (it names no platform); notebook targets of "
            f"{entry.name}: {', '.join(others) or 'none'}"
        )
    if platform is not None and target.platform != platform:
        raise EnvkitError(
            f"--on {platform}: target {name} is not a {platform.title()} notebook target "
            f"(platform: {target.platform or 'none'})"
        )
    if not entry.fits(target):
        if entry.targets:
            raise EnvkitError(
                f"{entry.name} runs on {', '.join(entry.targets)}, not {name}: add {name} to its targets "
                f"in {config.path.name}"
            )
        if where == NOTEBOOK:
            fitting = [other.name for other in config.experiments.values() if other.fits(target)]
            raise EnvkitError(
                f"experiment {entry.name} runs on {entry.kind}, target {name} is {target.kind}; "
                f"its experiments: {', '.join(fitting)}"
            )
        raise EnvkitError(f"target {name!r} is a {target.kind} target, but {entry.name} runs in a {entry.kind} image")
    return target


def _default(config, entry: Experiment, where: str, platform: str | None):
    fitting = [
        target
        for target in config.targets.values()
        if target.is_notebook == (where == NOTEBOOK)
        and (platform is None or target.platform == platform)
        and entry.fits(target)
    ]
    if entry.targets:
        fitting.sort(key=lambda target: entry.targets.index(target.name))
        if fitting:
            return fitting[0]
    elif where == IMAGE and entry.kind in config.targets and config.targets[entry.kind] in fitting:
        return config.targets[entry.kind]  # the target named after its kind
    elif len(fitting) == 1:
        return fitting[0]
    if fitting:
        found = f"several ({', '.join(t.name for t in fitting)}): pick one with --target NAME"
    elif entry.targets:
        found = f"none among its targets ({', '.join(entry.targets)}): add one"
    else:
        found = "none: add one"
    runs = f"in a {entry.kind} image" if where == IMAGE else f"on a {entry.kind} {platform or 'notebook'} target"
    raise EnvkitError(f"{entry.name} runs {runs}, and {config.path} has {found}")
