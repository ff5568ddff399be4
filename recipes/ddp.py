"""DistributedDataParallel's processes: torchrun on one host or several, and the process group.

A recipe started as ``--parallel ddp`` outside torchrun starts itself again under torchrun
(one command works for the user); started by torchrun, e.g. a bare ``torchrun recipe.py``
from a Slurm script or a Kubernetes operator, it never starts torchrun again.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import socket
import sys
import time
from collections.abc import Callable

import torch

import harness
from harness import RecipeError


def add_host_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags for several hosts; their defaults come from the environment that run.sh, Slurm or a
    launcher sets."""
    hosts = parser.add_argument_group(
        "several hosts (ddp; defaults from NNODES, NODE_RANK, RDZV_ENDPOINT, RDZV_ID)"
    )
    hosts.add_argument(
        "--nnodes",
        type=harness.positive_int,
        default=os.environ.get("NNODES") or "1",
        help="hosts (default: 1)",
    )
    hosts.add_argument(
        "--node-rank",
        type=harness.non_negative_int,
        default=os.environ.get("NODE_RANK") or None,
        help="this host's rank (default: the rendezvous assigns one)",
    )
    hosts.add_argument(
        "--rdzv-endpoint",
        default=os.environ.get("RDZV_ENDPOINT") or None,
        help="host:port where the hosts meet (c10d), e.g. the first host and a free port",
    )
    hosts.add_argument(
        "--rdzv-id",
        default=os.environ.get("RDZV_ID") or "envkit",
        help="rendezvous (job) id (default: envkit)",
    )
    hosts.add_argument(
        "--rdzv-timeout",
        type=harness.positive_int,
        default=60,
        help="seconds this host tries to reach --rdzv-endpoint before it gives up (default: 60)",
    )


def check_hosts(args: argparse.Namespace) -> None:
    if args.nnodes > 1 and args.parallel != "ddp":
        raise RecipeError(
            f"--nnodes {args.nnodes} needs --parallel ddp: only DDP spans several hosts"
        )
    if args.nnodes > 1 and not args.rdzv_endpoint and not under_torchrun():
        raise RecipeError(
            f"--nnodes {args.nnodes} needs --rdzv-endpoint host:port (or RDZV_ENDPOINT): where the "
            "hosts meet, e.g. the first host and a free port"
        )


def check_rendezvous(endpoint: str, timeout: int) -> None:
    """Before torchrun starts on several hosts: RecipeError, in one line, unless this host reaches
    ``endpoint``.

    torchrun's c10d rendezvous keeps its store on the host the endpoint names (it listens there once
    that host's torchrun runs) and every other host connects to it; a host that cannot would retry
    for minutes and end in a traceback. Here the endpoint's own host checks it can listen and
    connect at once, and any other host retries for up to ``timeout`` seconds (the first host may
    start later).
    """
    from torch.distributed.elastic.rendezvous import (
        c10d_rendezvous_backend,
        utils,
    )

    try:
        host, port = utils.parse_rendezvous_endpoint(
            endpoint, default_port=c10d_rendezvous_backend.DEFAULT_PORT
        )
        family, kind, _, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except (ValueError, OSError) as exc:
        raise RecipeError(
            f"--rdzv-endpoint {endpoint!r} names no reachable host:port ({_reason(exc)}); give the "
            "first host's name or address and a free port, e.g. node1:29400"
        ) from None
    deadline = time.monotonic() + timeout
    with socket.socket(family, kind) as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            listener.bind(address)
            listener.listen()
            # the endpoint is this host's and its port is free: torchrun will keep the store here
            hosting = True
        except OSError:
            hosting = (
                False  # another host's address, or a process here (another torchrun) holds the port
            )
        while True:
            try:
                socket.create_connection(
                    address[:2], timeout=max(0.1, min(5.0, deadline - time.monotonic()))
                ).close()
                return
            except OSError as exc:
                problem = _reason(exc)
            if hosting or time.monotonic() >= deadline:
                break
            time.sleep(0.5)
    waited = "" if hosting else f" after {timeout} s (--rdzv-timeout)"
    raise RecipeError(
        f"cannot reach the rendezvous at {endpoint}: {problem}{waited}; check that the first host "
        f"runs the same command, that {host} is its address as seen from here, and that port "
        f"{port} is open between the hosts"
    )


def _reason(exc: Exception) -> str:
    return " ".join(str(getattr(exc, "strerror", None) or exc or type(exc).__name__).split())


def under_torchrun() -> bool:
    """torchrun (torch.distributed.run) sets these for every process it starts."""
    return "LOCAL_RANK" in os.environ or "TORCHELASTIC_RUN_ID" in os.environ


def torchrun_topology() -> tuple[int, int]:
    """(processes in all, hosts) as torchrun set them for this process."""
    world = int(os.environ["WORLD_SIZE"])
    return world, world // int(os.environ.get("LOCAL_WORLD_SIZE", world))


def torchrun_command(args: argparse.Namespace, script: str, argv: list[str]) -> list[str]:
    """``script argv`` under torchrun: standalone on one host, a c10d rendezvous across ``--nnodes``
    hosts."""
    per_node = str(args.world_size // args.nnodes)
    if args.nnodes == 1:
        # Loopback, not this host's name: the store's address is the name otherwise, and a host
        # whose own name does not resolve (no 127.0.1.1 line) waits out two 300 s rendezvous
        # timeouts, then fails.
        rendezvous = ["--standalone", "--local-addr", "127.0.0.1", "--nproc-per-node", per_node]
    else:
        rendezvous = [
            "--nnodes",
            str(args.nnodes),
            "--nproc-per-node",
            per_node,
            "--rdzv-backend",
            "c10d",
            "--rdzv-endpoint",
            args.rdzv_endpoint,
            "--rdzv-id",
            args.rdzv_id,
        ]
        rendezvous += ["--node-rank", str(args.node_rank)] if args.node_rank is not None else []
        if _on_loopback(args.rdzv_endpoint):
            # Every "host" is this machine (a rehearsal before a cluster): each node's address is
            # loopback too, or a machine whose name does not resolve waits out the rendezvous's
            # timeouts, as above.
            rendezvous += ["--local-addr", "127.0.0.1"]
    # "--": otherwise torchrun's parser reads our options as (abbreviations of) its own, e.g.
    # --nproc.
    return [sys.executable, "-m", "torch.distributed.run", *rendezvous, "--", script, *argv]


def _on_loopback(endpoint: str) -> bool:
    """Whether a rendezvous endpoint (host:port, [v6]:port or a host alone) names this machine's
    loopback."""
    host = endpoint.rsplit(":", 1)[0] if endpoint.count(":") == 1 or "]" in endpoint else endpoint
    host = host.strip("[]")
    try:
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def torchrun_env(device: str) -> dict[str, str]:
    """The environment torchrun starts with: on a CPU, OMP_NUM_THREADS set to the run's thread
    budget (harness.devices.thread_budget), which its processes share (share_threads); torchrun
    itself would give each process one thread where it is unset. Another device's processes keep
    torchrun's default."""
    if device != "cpu":
        return dict(os.environ)
    budget, _ = harness.devices.thread_budget()
    return {**os.environ, harness.devices.THREADS_VARIABLE: str(budget)}


def process_group_arguments(device: torch.device) -> dict:
    """init_process_group's arguments: nccl told its GPU up front (else its first barrier guesses
    one), gloo on CPU."""
    return (
        {"backend": "nccl", "device_id": device} if device.type == "cuda" else {"backend": "gloo"}
    )


def in_process_group(device_kind: str, body: Callable[[dict], None]) -> None:
    """Join torchrun's process group, run ``body(fields)`` with the harness.Replicas fields that
    describe this process, wait for every process, and leave the group."""
    local_rank = int(os.environ["LOCAL_RANK"])
    device = torch.device("cpu")
    if device_kind == "cuda":
        harness.select_device("cuda")  # the one-line error when no GPU is visible
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    torch.distributed.init_process_group(**process_group_arguments(device))
    world, nodes = torchrun_topology()
    try:
        body(
            {
                "device": device,
                "rank": torch.distributed.get_rank(),
                "world_size": world,
                "local_rank": local_rank,
                "nodes": nodes,
            }
        )
        # Leave together: a process that closes its gloo connections while rank 0 is
        # still writing results can be aborted ("terminate called without an active exception").
        torch.distributed.barrier()
    finally:
        torch.distributed.destroy_process_group()
