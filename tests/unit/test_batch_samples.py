"""The samples of a batch: the leading dimension of its first tensor, whatever holds the tensors."""

from __future__ import annotations

from collections import UserDict

import torch

from pitstop.profiling._root import batch_dim, leading_dim, model_samples


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


def test_a_models_unbatched_float_input_is_one_sample_and_a_batch_of_ids_is_a_batch() -> None:
    assert model_samples((torch.zeros(4),), torch.Tensor, False) == 1  # one state of 4 features
    assert model_samples((torch.zeros(8, 4),), torch.Tensor, False) == 8
    assert model_samples((torch.zeros(8, dtype=torch.long), torch.zeros(8, dtype=torch.long)), torch.Tensor,
                         False) == 8  # a recommender's (users, items)
    assert model_samples((torch.zeros(4),), torch.Tensor, True) == 1
    assert model_samples((torch.zeros(35, 20, dtype=torch.long),), torch.Tensor, True) == 20  # sequence-first
    assert model_samples({"x": torch.zeros(8, 4)}, torch.Tensor, False) == 8
