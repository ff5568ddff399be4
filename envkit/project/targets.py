"""One target of envkit.yaml built from its mapping: its kind, the wheels, Python and base image its kind and the
matrix choose, each key checked (one line naming the file, line and field), the project's requirements among its pip
packages, and the hash of what decides its image.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from envkit.errors import EnvkitError
from envkit.project import kinds, wheels
from envkit.project.config import DEFAULT_PYTHON, Target
from envkit.project.dependencies import read_dependencies, with_dependencies
from envkit.project.document import DocPath, Locator, schema
from envkit.project.experiments import load_experiments
from envkit.project.matrix import Matrix, TorchRelease, minor_of, python_in_range
from envkit.project.requirement import requirement_name, unreadable
from envkit.support.bounded_load import note

if TYPE_CHECKING:
    from envkit.project import notebook_platforms

# Packages whose versions the matrix owns; a pip_packages entry must not re-pin them.
MATRIX_OWNED = {"torch", "torchvision", "torch-xla", "torch-tpu", "libtpu", "libtpu-nightly"}
# A distro base image (nvidia/cuda) ships no Python: the OS's python3 seeds the venv.
DISTRO_PYTHON_PACKAGES = ("python3", "python3-venv")
# A notebook target (one with a platform) runs in the platform's runtime, not in an image:
# these keys describe an image and have nothing to act on there.
IMAGE_ONLY_KEYS = (
    "base_image",
    "apt_snapshot",
    "apt_packages",
    "env",
    "ca_certificates",
    "shm_size",
    "gpus",
    "pip_extra_index_urls",
    "find_links",
    "cuda",
    "platforms",
)
NOTEBOOK_ONLY_KEYS = ("accelerator", "notebooks")


def build_target(
    name: str, raw: dict[str, Any], root: Path, matrix: Matrix, where: Locator, recipes: bool = True
) -> Target:
    """The target ``name``; ``recipes``: the project runs seed recipes, whose packages (tqdm) its images get."""
    at = ("targets", name)
    runtime = _notebook_runtime(raw, at, where)
    spec = _kind(raw, runtime, at, where)
    kind = spec.name
    torch = raw["torch"]
    release = matrix.torch_release(where(at + ("torch",)), torch)
    patch = torch.split(".")[2]
    torchvision = _torchvision(raw, release, patch, torch, where(at + ("torchvision",)))
    if "pip_extra_index_urls" in raw:
        # pip asks every index for every name and takes the best match from any of them.
        raise EnvkitError(
            f"{where(at + ('pip_extra_index_urls',))}: a second index lets any package come from either one; "
            f"envkit takes each package from one index: set pip_index_url to a mirror that serves them all, "
            f"or find_links for single projects' pages"
        )
    chosen = wheels.resolve(
        spec.wheels, wheels.Ask(raw, matrix, release, runtime, DEFAULT_PYTHON, lambda *key: where(at + key))
    )
    find_links = list(raw.get("find_links", []))
    find_links += [link for link in dict.fromkeys(chosen.find_links) if link not in find_links]
    python = raw.get("python", chosen.default_python)
    if not python_in_range(python, chosen.python_range):
        raise EnvkitError(
            f"{where(at + ('python',) if 'python' in raw else at)}: "
            f"Python {python} is outside torch {minor_of(torch)}'s "
            f"supported range {release.python[0]}-{release.python[1]}"
        )
    base_image, apt_packages = _base_image(raw, spec, chosen, python, runtime is not None, lambda *key: where(at + key))

    return _with_hash(
        Target(
            name=name,
            kind=kind,
            base_image=base_image,
            python=python,
            torch=torch,
            torchvision=torchvision,
            backend=chosen.backend,
            torch_xla=chosen.torch_xla,
            torch_tpu=chosen.torch_tpu,
            libtpu=chosen.libtpu,
            libtpu_package=chosen.libtpu_package,
            cuda=chosen.cuda,
            torch_variant=chosen.torch_variant,
            pip_index_url=raw.get("pip_index_url"),
            find_links=tuple(find_links),
            apt_packages=tuple(dict.fromkeys(apt_packages)),
            pip_packages=_pip_packages(raw.get("pip_packages", []), matrix, where, at, recipes),
            env={key: str(value) for key, value in sorted(raw.get("env", {}).items())},
            ca_certificates=_certificates(raw.get("ca_certificates", []), root, where, at),
            shm_size=raw.get("shm_size", spec.run.shm_size) if runtime is None else None,
            gpus=_gpus(raw.get("gpus", "all")) if "gpus" in spec.keys and runtime is None else None,
            apt_snapshot=raw.get("apt_snapshot"),
            platform=raw.get("platform"),
            accelerator=raw.get("accelerator"),
            notebooks=_notebook_experiments(name, raw, kind, where, at),
            platforms=_platforms(raw, spec, torch, where(at + ("platforms",))) if runtime is None else (),
            unlocked_allowed=raw.get("unlocked", {}).get("allowed"),
        ),
        root,
    )


def with_project_requirements(targets: dict[str, Target], data: dict, root: Path, where: Locator) -> dict[str, Target]:
    """Every target with the project's requirements (the file ``requirements`` names) among its pip packages,
    so each target's lock resolves them with its own torch build."""
    named = data["requirements"]
    path = (root / named).resolve()
    if not path.is_relative_to(root):
        raise EnvkitError(f"{where(('requirements',))}: {named!r} is outside the project; name a file under {root}")
    dependencies = read_dependencies(path, named)
    merged = {}
    for name, target in targets.items():
        own = data["targets"][name].get("pip_packages", [])
        at = ("targets", name, "pip_packages")
        pins = {package: None for package in MATRIX_OWNED} | {
            "torch": target.torch,
            "torchvision": target.torchvision,
            "torch-xla": target.torch_xla,
            "torch-tpu": target.torch_tpu,
            **({target.libtpu_package: target.libtpu} if target.libtpu_package else {}),
        }
        owned = {requirement_name(r): (r, where(at + (index,))) for index, r in enumerate(own)}
        packages = with_dependencies(name, pins, target.pip_packages, owned, dependencies)
        merged[name] = _with_hash(target._replace(pip_packages=packages), root)
    return merged


def _kind(raw: dict[str, Any], runtime, at: DocPath, where: Locator) -> kinds.Kind:
    """The target's kind (a notebook's follows from its accelerator), with every key it sets applying to it."""
    kind = raw.get("kind")
    if runtime is not None:
        from envkit.project import notebook_platforms

        accelerator = notebook_platforms.platform(raw["platform"]).accelerator(raw["accelerator"])
        if kind is not None and kind != accelerator.kind:
            raise EnvkitError(
                f"{where(at + ('kind',))}: {raw['platform']}'s {accelerator.name} is a {accelerator.kind} accelerator, "
                f"not {kind}; drop kind (it follows from the accelerator)"
            )
        kind = accelerator.kind
    elif kind is None:
        raise EnvkitError(f"{where(at)}: 'kind' is a required property (or 'platform' for a notebook target)")
    for key in raw:
        owners = [other.name for other in kinds.load_kinds().values() if key in other.keys]
        if owners and kind not in owners:
            raise EnvkitError(f"{where(at + (key,))}: {key!r} applies to {', '.join(owners)} targets only, not {kind}")
    return kinds.kind(kind)


def _base_image(
    raw: dict[str, Any], spec: kinds.Kind, chosen: wheels.Wheels, python: str, notebook: bool, where
) -> tuple[str | None, list[str]]:
    """The base image (None for a notebook: it runs in the platform's runtime) and the apt packages it needs."""
    apt_packages = list(raw.get("apt_packages", []))
    if notebook:
        return None, apt_packages
    if spec.base_image == "python":
        return raw.get("base_image") or spec.python_base_image.format(python=python), apt_packages
    default = chosen.default_base
    if default is None:
        raise EnvkitError(
            f"{where('kind')}: kind {spec.name} takes its base image from wheels {spec.wheels!r}, which names none"
        )
    if not _carries_python(raw.get("base_image"), spec):
        apt_packages = [*DISTRO_PYTHON_PACKAGES, *apt_packages]
    if "base_image" not in raw and python != chosen.default_python:
        raise EnvkitError(
            f"{where('python')}: Python {python} is not the python3 of the default base image "
            f"{default} ({chosen.default_python}); set base_image to an image with Python {python}, or drop python"
        )
    return raw.get("base_image") or default, apt_packages


def _notebook_runtime(raw: dict[str, Any], at: DocPath, where: Locator) -> notebook_platforms.Runtime | None:
    """The platform runtime a notebook target runs in (its Python and glibc are the lock's platform), or None."""
    # notebook_platforms is imported only where a target is or could be a notebook's: a config without notebook
    # targets never builds the platforms' records (issue 42: their dataclasses at import)
    if "platform" not in raw:
        for key in NOTEBOOK_ONLY_KEYS:
            if key in raw:
                from envkit.project.notebook_platforms import names

                raise EnvkitError(
                    f"{where(at + (key,))}: {key!r} applies to notebook targets only: "
                    f"add platform ({', '.join(names())})"
                )
        return None
    from envkit.project import notebook_platforms

    for key in IMAGE_ONLY_KEYS:
        if key in raw:
            raise EnvkitError(
                f"{where(at + (key,))}: {key!r} does not apply to a notebook target: "
                f"it runs in {raw['platform']}'s runtime, not in an image"
            )
    if "accelerator" not in raw:
        raise EnvkitError(
            f"{where(at)}: a notebook target needs 'accelerator' (one of {raw['platform']}'s accelerators)"
        )
    platform = notebook_platforms.platform(raw["platform"], f"{where(at + ('platform',))}: ")
    return platform.runtime_of(platform.accelerator(raw["accelerator"], f"{where(at + ('accelerator',))}: "))


def _notebook_experiments(target: str, raw: dict[str, Any], kind: str, where: Locator, at: DocPath) -> tuple[str, ...]:
    """A notebook target's committed experiments: each of its kind, and each with the devices it needs."""
    names = raw.get("notebooks", [])
    table = load_experiments(where.path)
    for index, name in enumerate(names):
        fitting = [entry.name for entry in table.values() if entry.runs_on(target, kind)]
        if name not in fitting:
            choices = f"choose from {', '.join(fitting)}" if fitting else "the project's experiments have none"
            raise EnvkitError(
                f"{where(at + ('notebooks', index))}: {name!r} is not an experiment that runs on {target} ({kind}); "
                f"{choices}"
            )
        from envkit.project.notebook_platforms import refuse_too_few_devices

        refuse_too_few_devices(
            table[name], target, raw["platform"], raw["accelerator"], f"{where(at + ('notebooks', index))}: "
        )
    return tuple(names)


def _carries_python(base_image: str | None, spec: kinds.Kind) -> bool:
    """Whether a configured base is the python image kinds.yaml names, which brings its own Python."""
    if base_image is None:
        return False
    name = base_image.split("@", 1)[0].rsplit("/", 1)[-1].split(":", 1)[0]
    return name == spec.python_base_image.split(":", 1)[0]


def _torchvision(raw: dict[str, Any], release: TorchRelease, patch: str, torch: str, field_at: str) -> str | None:
    value = raw.get("torchvision")
    if value is False:
        return None
    minor = release.torchvision
    if minor is None:
        raise EnvkitError(f"{field_at}: torch {torch} needs torchvision: false; {release.torchvision_missing}")
    if value is None:
        return f"{minor}.{patch}"
    if minor_of(value) != minor:
        raise EnvkitError(
            f"{field_at}: torchvision {value} does not go with torch {torch}; "
            f"valid choices: {minor}.x, or false to leave it out"
        )
    return value


def _pip_packages(extra: list[str], matrix: Matrix, where: Locator, at: DocPath, recipes: bool) -> tuple[str, ...]:
    """The target's pip_packages, after the recipes' packages (tqdm) where the project runs seed recipes: a
    project of its own commands locks its requirements and what envkit's run wrapper needs (nothing: stdlib)."""
    for index, requirement in enumerate(extra):
        why = unreadable(requirement)
        if why is not None:
            allowed = schema()["$defs"]["target"]["properties"]["pip_packages"]["items"]["description"]
            at_entry = where(at + ("pip_packages", index))
            raise EnvkitError(f"{at_entry}: {requirement!r} is not a requirement ({why}); allowed: {allowed}")
        if requirement_name(requirement) in MATRIX_OWNED:
            raise EnvkitError(
                f"{where(at + ('pip_packages', index))}: {requirement!r} re-pins a package the matrix owns; "
                f"set the target's torch/torchvision/torch_xla/libtpu keys instead"
            )
    # A user's own tqdm (or other recipe package) spec replaces envkit's default pin.
    overridden = {requirement_name(r) for r in extra}
    defaults = [r for r in matrix.recipe_packages if recipes and requirement_name(r) not in overridden]
    return tuple(dict.fromkeys([*defaults, *extra]))


def _certificates(paths: list[str], root: Path, where: Locator, at: DocPath) -> tuple[Path, ...]:
    resolved = []
    for index, relative in enumerate(paths):
        cert = (root / relative).resolve()
        note(cert)  # looked for: the render memo must see it go
        if not cert.is_file():
            raise EnvkitError(
                f"{where(at + ('ca_certificates', index))}: {relative} is not a file (paths are relative to {root})"
            )
        resolved.append(cert)
    return tuple(resolved)


def _platforms(raw: dict[str, Any], spec: kinds.Kind, torch: str, where: str) -> tuple[str, ...]:
    """The platforms a target names (default: its kind's), each one its kind may build for."""
    named = raw.get("platforms", spec.platforms)
    for name in named:
        if name in spec.platforms:
            continue
        if spec.wheels == "cuda" and name == "linux/arm64":
            raise EnvkitError(
                f"{where}: {name}: PyPI's aarch64 torch {torch} is the CPU build, so an arm64 cuda image would "
                f"train on the CPU; a cuda target builds for {', '.join(spec.platforms)} only"
            )
        raise EnvkitError(f"{where}: {name}: a {spec.name} target builds for {', '.join(spec.platforms)} only")
    return tuple(sorted(set(named), key=list(named).index))


def _gpus(value: str | list[int]) -> str:
    return value if value == "all" else ",".join(str(index) for index in value)


def _with_hash(target: Target, root: Path) -> Target:
    # Hash what decides the image, with paths made relative so that the same
    # config yields the same hash on every machine.
    fields = target._asdict()
    fields.pop("config_hash")
    fields.pop("unlocked_allowed")  # a gate's setting, not the image's
    # Keys added later enter the hash only when set, so unchanged configs keep their hash.
    for later in ("apt_snapshot", "platform", "accelerator", "notebooks", "platforms"):
        if fields[later] in (None, (), kinds.DEFAULT_PLATFORMS):
            fields.pop(later)
    fields["ca_certificates"] = [_relative(path, root) for path in target.ca_certificates]
    digest = hashlib.sha256(json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    return target._replace(config_hash=digest)


def _relative(path: Path, root: Path) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return path.as_posix()
