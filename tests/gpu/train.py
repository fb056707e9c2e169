# SPDX-License-Identifier: MIT
# PyTorch victim: a seeded training loop that writes each step's loss, as
# float.hex so that "bit-identical" means what it says, to OUT. Between steps
# it sleeps so that a checkpoint can land mid-run.
#   python3 train.py OUT STEPS [SLEEP_S] [WIDTH]
import os, sys, time
import torch

out, steps = sys.argv[1], int(sys.argv[2])
pause = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0
width = int(sys.argv[4]) if len(sys.argv) > 4 else 2048
torch.manual_seed(1234)
torch.backends.cudnn.deterministic = True
torch.use_deterministic_algorithms(True)
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
dev = torch.device("cuda")
model = torch.nn.Sequential(
    torch.nn.Linear(width, width), torch.nn.ReLU(),
    torch.nn.Linear(width, width), torch.nn.ReLU(),
    torch.nn.Linear(width, 10)).to(dev)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
data = torch.randn(64 * steps, width, device=dev)
target = torch.randint(0, 10, (64 * steps,), device=dev)
with open(out, "a", buffering=1) as f:
    for step in range(steps):
        x, y = data[step * 64:(step + 1) * 64], target[step * 64:(step + 1) * 64]
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        f.write(f"{step} {loss.item().hex()}\n")
        time.sleep(pause)
