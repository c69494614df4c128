"""Two optimizers stepping in one iteration (a GAN): pitstop must count one step per iteration."""
import sys

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 20
torch.manual_seed(0)
data = TensorDataset(torch.randn(steps * 16, 8))
gen, disc = nn.Linear(4, 8), nn.Linear(8, 1)
opt_g = torch.optim.Adam(gen.parameters(), 1e-3)
opt_d = torch.optim.Adam(disc.parameters(), 1e-3)
bce = nn.BCEWithLogitsLoss()
for (real,) in DataLoader(data, batch_size=16):
    fake = gen(torch.randn(real.shape[0], 4))
    loss_d = bce(disc(real), torch.ones(real.shape[0], 1)) + bce(disc(fake.detach()), torch.zeros(real.shape[0], 1))
    opt_d.zero_grad(); loss_d.backward(); opt_d.step()
    loss_g = bce(disc(fake), torch.ones(real.shape[0], 1))
    opt_g.zero_grad(); loss_g.backward(); opt_g.step()
print("gan done")
