# SPDX-License-Identifier: MIT
# PyTorch training fed by a DataLoader with two persistent worker processes,
# forked (Linux's default) from the CUDA process: each step's loss, as
# float.hex, to OUT.   python3 pt_dataloader.py OUT STEPS PAUSE_S
import sys, time
import torch

out, steps, pause = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
torch.manual_seed(1234)
torch.use_deterministic_algorithms(True)
dev = torch.device("cuda")
model = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=1e-2)
data = torch.utils.data.TensorDataset(torch.randn(4096, 512), torch.randint(0, 10, (4096,)))
loader = torch.utils.data.DataLoader(data, batch_size=64, shuffle=True, num_workers=2,
                                     persistent_workers=True,
                                     generator=torch.Generator().manual_seed(7))
step = 0
with open(out, "a", buffering=1) as f:
    while step < steps:
        for x, y in loader:
            if step == steps:
                break
            x, y = x.to(dev), y.to(dev)
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            f.write(f"{step} {loss.item().hex()}\n")
            step += 1
            time.sleep(pause)
