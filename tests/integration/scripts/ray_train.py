"""A Ray Train job as its users write it: TorchTrainer over 2 CPU workers on a local cluster.

`prepare_model` wraps the model in DDP (gloo), `prepare_data_loader` adds a
DistributedSampler; each worker trains EPOCHS epochs of STEPS steps.
`ray_train.py STEPS EPOCHS auto` joins a cluster started beforehand (`ray.init(address="auto")`).
Each worker prints the steps it took ("worker R pid P done: N steps").
"""
import os
import sys

import ray
import torch
from ray.train import RunConfig, ScalingConfig
from ray.train.torch import TorchTrainer, prepare_data_loader, prepare_model
from torch.utils.data import DataLoader, TensorDataset

STEPS = int(sys.argv[1]) if len(sys.argv) > 1 else 32
EPOCHS = int(sys.argv[2]) if len(sys.argv) > 2 else 2
WORKERS = 2


def train_func() -> None:
    torch.set_num_threads(1)
    model = prepare_model(torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4)))
    data = TensorDataset(torch.randn(STEPS * 8 * WORKERS, 32), torch.randn(STEPS * 8 * WORKERS, 4))
    loader = prepare_data_loader(DataLoader(data, batch_size=8, shuffle=True))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    steps = 0
    for epoch in range(EPOCHS):
        if hasattr(loader.sampler, "set_epoch"):
            loader.sampler.set_epoch(epoch)
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            steps += 1
    # the script's own count, which the tests hold pitstop's record to
    print(f"worker {ray.train.get_context().get_world_rank()} pid {os.getpid()} done: {steps} steps", flush=True)


if __name__ == "__main__":
    if len(sys.argv) > 3 and sys.argv[3] == "auto":  # a cluster started beforehand (`ray start --head`)
        ray.init(address="auto", log_to_driver=True)
    else:
        ray.init(num_cpus=WORKERS, include_dashboard=False, log_to_driver=True)
    # RAY_STORAGE unset: Ray's default storage path (~/ray_results)
    trainer = TorchTrainer(train_func, scaling_config=ScalingConfig(num_workers=WORKERS, use_gpu=False),
                           run_config=RunConfig(name="pitstop-ray-test", storage_path=os.environ.get("RAY_STORAGE")))
    result = trainer.fit()
    print(f"ray train finished: error={result.error}", flush=True)
    ray.shutdown()
