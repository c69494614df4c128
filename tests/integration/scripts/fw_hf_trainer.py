"""A Hugging Face `transformers` Trainer on the CPU: a tiny GPT-2 built from a config, evaluated every few steps.

No hub access (the model is randomly initialised from a config object), no
tokenizer, synthetic token ids, no reporting integrations, no checkpoints. The
script stamps its own optimizer steps with a plain global post-hook (the
reference pitstop's steps are compared with) and notes how many steps were
done at each evaluation and the Trainer's own `eval_runtime` of it; it writes
them to OUT.

usage: fw_hf_trainer.py MAX_STEPS BATCH EVAL_STEPS OUTPUT_DIR OUT
"""

from __future__ import annotations

import json
import sys
import time

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook
from torch.utils.data import Dataset
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments

MAX_STEPS, BATCH, EVAL_STEPS = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
OUTPUT_DIR, OUT = sys.argv[4], sys.argv[5]
SEQ = 32
VOCAB = 128

stamps: list[float] = []
register_optimizer_step_post_hook(lambda *_: stamps.append(time.perf_counter()))


class Tokens(Dataset):
    """Random token sequences; the labels are the inputs (causal LM)."""

    def __init__(self, n: int, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        self.ids = torch.randint(0, VOCAB, (n, SEQ), generator=g)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


class Evaluations(TrainerCallback):
    """Optimizer steps done at each evaluation (no optimizer steps during one)."""

    def __init__(self) -> None:
        self.at: list[int] = []
        self.runtime: list[float] = []  # the Trainer's own timer of each evaluation (metrics["eval_runtime"])

    def on_evaluate(self, args: object, state: object, control: object, **kwargs: object) -> None:
        self.at.append(len(stamps))
        metrics = kwargs.get("metrics")
        self.runtime.append(float(metrics["eval_runtime"]) if isinstance(metrics, dict) else float("nan"))


torch.manual_seed(0)
config = GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=VOCAB, n_positions=SEQ,
                    bos_token_id=VOCAB - 1, eos_token_id=VOCAB - 1)  # GPT-2's own ids lie outside a vocabulary of 128
model = GPT2LMHeadModel(config)
args = TrainingArguments(
    output_dir=OUTPUT_DIR,
    max_steps=MAX_STEPS,
    per_device_train_batch_size=BATCH,
    per_device_eval_batch_size=32,
    eval_strategy="steps",
    eval_steps=EVAL_STEPS,
    logging_steps=EVAL_STEPS,
    save_strategy="no",
    report_to=[],
    use_cpu=True,
    disable_tqdm=True,
    dataloader_num_workers=0,
    seed=0,
)
evaluations = Evaluations()
trainer = Trainer(
    model=model,
    args=args,
    train_dataset=Tokens(BATCH * MAX_STEPS * 2, 0),
    eval_dataset=Tokens(96, 1),
    callbacks=[evaluations],
)
trainer.train()

result = {
    "optimizer_steps": len(stamps),
    "global_step": trainer.state.global_step,
    "eval_at": evaluations.at,
    "eval_runtime": evaluations.runtime,
    "stamps": stamps,
    "batch": BATCH,
}
with open(OUT, "w") as f:
    json.dump(result, f)
print(f"{len(stamps)} optimizer steps, evaluation at {evaluations.at}; done")
