# SPDX-License-Identifier: MIT
# DistributedDataParallel over NCCL, one rank per GPU (WORLD ranks, spawned
# with torch.multiprocessing as a user would): rank 0 writes each step's
# loss to OUT.   python3 ddp_nccl.py OUT STEPS PAUSE_S [WORLD]
import os, sys, time
import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def rank_main(rank, world, out, steps, pause):
    dist.init_process_group("nccl", rank=rank, world_size=world)
    torch.cuda.set_device(rank)
    torch.manual_seed(1234)
    model = torch.nn.parallel.DistributedDataParallel(
        torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)).cuda(),
        device_ids=[rank])
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    g = torch.Generator(device="cuda").manual_seed(rank)
    f = open(out, "a", buffering=1) if rank == 0 else None
    for step in range(steps):
        x = torch.randn(64, 512, device="cuda", generator=g)
        y = torch.randint(0, 10, (64,), device="cuda", generator=g)
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
