# SPDX-License-Identifier: MIT
# Two NCCL communicators in one job, as tensor- and pipeline-parallel jobs
# have: the world group (bound to a device, so PyTorch makes it at once)
# and a group made from it with new_group, which PyTorch then splits from
# the world's communicator (ncclCommSplit). Each step all-reduces the
# gradients over the world and broadcasts a tensor over the second group,
# with no pause between steps. Rank 0 writes each step's loss, as hex.
#   python3 groups_train.py OUT STEPS PAUSE_S [WORLD]
import os, sys, time
import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def rank_main(rank, world, out, steps, pause):
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=torch.device("cuda", rank))
    second = dist.new_group(list(range(world)))
    torch.manual_seed(1234)
    model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    g = torch.Generator(device="cuda").manual_seed(rank)
    f = open(out, "a", buffering=1) if rank == 0 else None
    for step in range(steps):
        x = torch.randn(64, 512, device="cuda", generator=g)
        y = torch.randint(0, 10, (64,), device="cuda", generator=g)
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= world
        opt.step()
        shift = torch.full((1,), float(step), device="cuda") if rank == 0 else torch.zeros(1, device="cuda")
        dist.broadcast(shift, 0, group=second)
        if f:
            f.write(f"{step} {loss.item().hex()} {shift.item()}\n")
        time.sleep(pause)
    dist.destroy_process_group()


if __name__ == "__main__":
    out, steps, pause = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    world = int(sys.argv[4]) if len(sys.argv) > 4 else torch.cuda.device_count()
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
    mp.spawn(rank_main, args=(world, out, steps, pause), nprocs=world)
