# SPDX-License-Identifier: MIT
# DistributedDataParallel over NCCL, one rank per GPU (WORLD ranks, spawned
# with torch.multiprocessing as a user would): rank 0 writes each step's
# loss to OUT.
#   python3 ddp_nccl.py OUT STEPS PAUSE_S [WORLD]
#   python3 ddp_nccl.py --bench STEPS [WORLD]   (prints ms per step)
# DDP_HIDDEN sizes the model (default 512; 8192 makes 256 MiB of gradients).
import os, sys, time
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

HIDDEN = int(os.environ.get("DDP_HIDDEN", "512"))


def rank_main(rank, world, out, steps, pause):
    dist.init_process_group("nccl", rank=rank, world_size=world)
    torch.cuda.set_device(rank)
    torch.manual_seed(1234)
    model = torch.nn.parallel.DistributedDataParallel(
        torch.nn.Sequential(torch.nn.Linear(512, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, HIDDEN),
                            torch.nn.ReLU(), torch.nn.Linear(HIDDEN, 10)).cuda(),
        device_ids=[rank])
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    g = torch.Generator(device="cuda").manual_seed(rank)
    f = open(out, "a", buffering=1) if rank == 0 and out else None
    warm, t0 = 5, 0.0
    for step in range(steps):
        if step == warm:
            torch.cuda.synchronize()
            t0 = time.perf_counter()
        x = torch.randn(64, 512, device="cuda", generator=g)
        y = torch.randint(0, 10, (64,), device="cuda", generator=g)
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        if f:
            f.write(f"{step} {loss.item().hex()}\n")
        time.sleep(pause)
    if not out and rank == 0:
        torch.cuda.synchronize()
        ms = (time.perf_counter() - t0) * 1000 / (steps - warm)
        params = sum(p.numel() for p in model.parameters())
        print(f"ddp_nccl: {ms:.3f} ms per step ({world} ranks, {params * 4 / 2**20:.0f} MiB of gradients)")
    dist.destroy_process_group()


if __name__ == "__main__":
    bench = sys.argv[1] == "--bench"
    if bench:
        out, steps, pause, rest = None, int(sys.argv[2]), 0.0, sys.argv[3:]
    else:
        out, steps, pause, rest = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4:]
    world = int(rest[0]) if rest else torch.cuda.device_count()
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
    mp.spawn(rank_main, args=(world, out, steps, pause), nprocs=world)
