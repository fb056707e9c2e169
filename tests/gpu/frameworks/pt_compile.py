# SPDX-License-Identifier: MIT
# torch.compile (Triton kernels, inductor's compile workers) with its
# defaults: each step's loss to OUT.   python3 pt_compile.py OUT STEPS PAUSE_S
import sys, time
import torch

out, steps, pause = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
torch.manual_seed(1234)
dev = torch.device("cuda")
model = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 10)).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=1e-2)
step_fn = torch.compile(model)
data = torch.randn(64 * steps, 1024, device=dev)
target = torch.randint(0, 10, (64 * steps,), device=dev)
with open(out, "a", buffering=1) as f:
    for step in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(step_fn(data[step * 64:(step + 1) * 64]),
                                                 target[step * 64:(step + 1) * 64])
        loss.backward()
        opt.step()
        f.write(f"{step} {loss.item().hex()}\n")
        time.sleep(pause)
