# SPDX-License-Identifier: MIT
# Python multiprocessing with its spawn start method beside a CUDA parent:
# a worker process makes each step's batch on the CPU and sends it through
# a Queue (an Event stops it; POSIX semaphores in /dev/shm underneath);
# the parent trains on the GPU and writes each step's loss to OUT.
#   python3 mp_spawn.py OUT STEPS PAUSE_S
import sys, time
import multiprocessing as mp


def worker(q, stop, steps):
    import random
    rng = random.Random(1234)
    for step in range(steps):
        if stop.is_set():
            break
        q.put([[rng.uniform(-1, 1) for _ in range(64)] for _ in range(32)])


if __name__ == "__main__":
    mp.set_start_method("spawn")
    out, steps, pause = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    q, stop = mp.Queue(maxsize=4), mp.Event()
    p = mp.Process(target=worker, args=(q, stop, steps))
    p.start()
    import torch
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    with open(out, "a", buffering=1) as f:
        for step in range(steps):
            x = torch.tensor(q.get(), device="cuda")
            loss = (model(x) - x.sum(1, keepdim=True)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            f.write(f"{step} {loss.item().hex()}\n")
            time.sleep(pause)
    stop.set()
    p.join()
