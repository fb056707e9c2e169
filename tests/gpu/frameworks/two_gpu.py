# SPDX-License-Identifier: MIT
# One process on two GPUs: the first half of a model on cuda:0, the rest
# on cuda:1, Adam, activations copied across every step (PyTorch enables
# peer access for that), and a buffer of BUFFER_MIB on each GPU in one
# allocation, checked every step. Each step's loss and the buffers' sums
# to OUT.   BUFFER_MIB=N python3 two_gpu.py OUT STEPS PAUSE_S
import os, sys, time
import torch

out, steps, pause = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
mib = int(os.environ.get("BUFFER_MIB", "4"))
torch.manual_seed(0)
a = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU()).to("cuda:0")
b = torch.nn.Sequential(torch.nn.Linear(512, 10)).to("cuda:1")
opt = torch.optim.Adam(list(a.parameters()) + list(b.parameters()), lr=1e-3)
buffers = [torch.ones(mib << 18, device=f"cuda:{d}") * (d + 1) for d in (0, 1)]
g = torch.Generator(device="cuda:0").manual_seed(1)
with open(out, "a", buffering=1) as f:
    for step in range(steps):
        x = torch.randn(64, 256, device="cuda:0", generator=g)
        y = torch.randint(0, 10, (64,), device="cuda:0", generator=g).to("cuda:1")
        loss = torch.nn.functional.cross_entropy(b(a(x).to("cuda:1")), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sums = " ".join(str(int(t.sum().item())) for t in buffers)
        f.write(f"{step} {loss.item().hex()} {sums}\n")
        time.sleep(pause)
