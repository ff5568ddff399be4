"""A user's DDP script, as the PyTorch tutorial writes one: it reads the rank torchrun gives and needs torchrun.

Averages one tensor across the processes (gloo on CPUs, NCCL on GPUs) and prints what each process holds.
"""

import os

import torch
import torch.distributed as dist


def main() -> None:
    local_rank = int(os.environ["LOCAL_RANK"])
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    dist.init_process_group(backend)
    device = torch.device("cuda", local_rank) if backend == "nccl" else torch.device("cpu")
    value = torch.tensor([float(dist.get_rank() + 1)], device=device)
    dist.all_reduce(value)
    print(f"rank {dist.get_rank()} of {dist.get_world_size()}: sum={value.item():.1f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
