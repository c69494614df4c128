"""An actor-critic's episodes: one state a forward, unbatched (a 1-D float tensor), one optimizer step an episode."""
import sys

import torch

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 12
torch.manual_seed(0)
policy = torch.nn.Sequential(torch.nn.Linear(4, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2))
opt = torch.optim.Adam(policy.parameters(), lr=1e-2)
for episode in range(steps):
    log_probs = []
    for move in range(3 + episode % 4):  # 3 to 6 moves an episode
        state = torch.randn(4)  # one state of 4 features, no batch dimension (pytorch/examples' actor_critic.py)
        probs = torch.softmax(policy(state), dim=-1)
        action = torch.multinomial(probs, 1)
        log_probs.append(torch.log(probs[action]))
    loss = -torch.cat(log_probs).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
print("unbatched done")
