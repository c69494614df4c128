"""The samples of a batch: the leading dimension of its first tensor, whatever holds the tensors."""

from __future__ import annotations

from collections import UserDict

import torch

from pitstop.profiling._root import batch_dim, leading_dim


class BatchEncoding(UserDict):  # transformers' tokenizer output: a UserDict, not a dict
    pass


def test_a_batch_in_a_mapping_that_is_not_a_dict_has_its_samples_seen() -> None:
    batch = BatchEncoding(input_ids=torch.zeros(16, 128, dtype=torch.long), attention_mask=torch.ones(16, 128))
    assert leading_dim(batch, torch.Tensor) == 16
    assert batch_dim(batch, torch.Tensor, 1) == 128  # a sequence-first model's batch dimension


def test_tuples_dicts_and_tensors() -> None:
    x, y = torch.zeros(8, 3), torch.zeros(8)
    assert leading_dim((x, y), torch.Tensor) == 8
    assert leading_dim({"x": x}, torch.Tensor) == 8
    assert leading_dim([{"pixels": x}, y], torch.Tensor) == 8
    assert leading_dim(torch.tensor(1.0), torch.Tensor) is None
    assert leading_dim("text", torch.Tensor) is None
