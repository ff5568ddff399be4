"""`envkit doctor [--probe]`: what this host offers, and a short training probe per device kind."""

from __future__ import annotations

import argparse
import json
import sys

from envkit.cli.options import add_config, load_image_target


def register(subparsers) -> None:
    doctor = subparsers.add_parser("doctor", help="what this host offers and which make targets will work here")
    doctor.add_argument(
        "--require",
        metavar="KIND",
        help="exit 2 with the reason when this host cannot run that kind "
        "(a kind of envkit/data/kinds.yaml: cpu, cuda, tpu-vm, ...)",
    )
    doctor.add_argument("--gpus", help="also check a GPUS value (comma-separated indices or 'all')")
    doctor.add_argument("--json", action="store_true", help="print the facts as JSON")
    doctor.add_argument(
        "--probe",
        action="store_true",
        help="train briefly on every device kind here (recipes/probe.py): OK with the step time, or why not",
    )
    doctor.add_argument("--image", metavar="TARGET", help="with --probe: run the probe inside TARGET's built image")
    add_config(doctor)
    doctor.set_defaults(func=cmd_doctor)


def _probe(args: argparse.Namespace) -> int:
    from envkit.host import probe
    from envkit.host.container import run_recipe

    if args.image is None:
        return probe.probe_here(args.config.resolve().parent, args.json)
    config, target = load_image_target(args.config, args.image)
    probe.probe_script(config.root)
    return run_recipe(config, target, probe.RECIPE, probe.recipe_args(args.json), gpus=args.gpus)


def cmd_doctor(args: argparse.Namespace) -> int:
    from envkit.host import doctor
    from envkit.project import kinds

    if args.image and not args.probe:
        from envkit.errors import EnvkitError

        raise EnvkitError("--image applies to --probe only: envkit doctor --probe --image TARGET")
    if args.probe:
        return _probe(args)
    if args.require:
        kinds.kind(args.require)  # an unknown kind is bad input: say so before asking the engine
    facts = doctor.inspect_host()
    if args.require:
        doctor.require(facts, args.require, args.gpus)
        print(f"envkit: this host can run {args.require} images", file=sys.stderr)
        return 0
    if args.gpus:
        doctor.parse_gpus(args.gpus, len(facts.gpus) if facts.gpus else None)
    if args.json:
        print(json.dumps(doctor.as_json(facts, args.config), indent=2, sort_keys=True))
    else:
        print(doctor.format_report(facts, args.config))
    return 0
