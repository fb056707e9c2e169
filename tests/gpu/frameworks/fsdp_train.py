# SPDX-License-Identifier: MIT
# FSDP2 (fully_shard) over NCCL, one rank per GPU, PyTorch's defaults:
# parameters sharded across ranks, gathered for each layer (all-gather) and
# gradients reduce-scattered, with no pause between steps. Rank 0 writes
# each step's loss, as hex, to OUT.
#   python3 fsdp_train.py OUT STEPS PAUSE_S [WORLD]
import os, sys, time
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.fsdp import fully_shard

HIDDEN = 1024


def rank_main(rank, world, out, steps, pause):
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=torch.device("cuda", rank))
    torch.manual_seed(1234)
    model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(HIDDEN, HIDDEN), torch.nn.ReLU())
                                  for _ in range(6)], torch.nn.Linear(HIDDEN, 10)).cuda()
    for layer in model[:-1]:
        fully_shard(layer)
    fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator(device="cuda").manual_seed(rank)
    f = open(out, "a", buffering=1) if rank == 0 else None
    for step in range(steps):
        x = torch.randn(32, HIDDEN, device="cuda", generator=g)
        y = torch.randint(0, 10, (32,), device="cuda", generator=g)
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        if f:
            f.write(f"{step} {loss.item().hex()}\n")
        time.sleep(pause)
    dist.destroy_process_group()


if __name__ == "__main__":
    out, steps, pause = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    world = int(sys.argv[4]) if len(sys.argv) > 4 else torch.cuda.device_count()
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
    mp.spawn(rank_main, args=(world, out, steps, pause), nprocs=world)
