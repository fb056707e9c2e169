# SPDX-License-Identifier: MIT
# PyTorch Lightning's Trainer with its defaults, fed by a DataLoader with two
# workers: each training step's loss to OUT.
#   python3 lightning_fit.py OUT STEPS PAUSE_S
import sys, time
import torch
import pytorch_lightning as pl

out, steps, pause = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
pl.seed_everything(1234, workers=True)
f = open(out, "a", buffering=1)


class Net(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))

    def training_step(self, batch, i):
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self.net(x), y)
        return loss

    def on_train_batch_end(self, outputs, batch, i):
        f.write(f"{self.global_step - 1} {outputs['loss'].item().hex()}\n")
        time.sleep(pause)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=1e-2)


data = torch.utils.data.TensorDataset(torch.randn(2048, 256), torch.randint(0, 10, (2048,)))
loader = torch.utils.data.DataLoader(data, batch_size=32, shuffle=True, num_workers=2)
trainer = pl.Trainer(max_steps=steps, accelerator="gpu", devices=1, deterministic=True,
                     logger=False, enable_checkpointing=False, enable_progress_bar=False,
                     enable_model_summary=False)
trainer.fit(Net(), loader)
