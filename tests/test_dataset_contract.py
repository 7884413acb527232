"""The ``dataset`` contract for a user's target (ms_exp/data/build.py): numpy arrays or a
MindSpore dataset of unbatched samples, batched, shuffled and sharded by ms_exp."""

import multiprocessing
import sys
import textwrap

import numpy as np
import pytest
from omegaconf import OmegaConf

from ms_exp.config.errors import ConfigError
from ms_exp.data import Shard, create_datasets

SOURCES = """
import mindspore.dataset as ds
import numpy as np


class Indexed:
    def __getitem__(self, i):
        return np.full((3,), i, np.float32), np.int32(i % 5)

    def __len__(self):
        return 40


def indexed(split, size=40):
    return ds.GeneratorDataset(Indexed(), ["data", "label"], shuffle=False)


def streamed(split):
    def rows():
        for i in range(40):
            yield np.full((3,), i, np.float32), np.int32(i % 5)
    return ds.GeneratorDataset(rows, ["data", "label"])


def arrays(split, count=40):
    x = np.arange(count * 2, dtype=np.float64).reshape(count, 2)
    return x, np.arange(count) % 3
"""


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    (tmp_path / "user_data.py").write_text(textwrap.dedent(SOURCES))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "user_data"
    sys.modules.pop("user_data", None)


def option(target: str, **keys):
    return OmegaConf.create({"_target_": target, "batch_size": 4, **keys})


def firsts(dataset) -> list:
    return [
        int(row[0])
        for batch in dataset.create_tuple_iterator(output_numpy=True)
        for row in batch[0]
    ]


def test_arrays_are_batched_cast_and_sized_without_forking(user_module):
    cfg = option(f"{user_module}.arrays", shuffle=False, num_parallel_workers=2)
    train, evaluation, spec = create_datasets(cfg)
    assert (spec.image_shape, spec.num_classes, spec.train_size) == ((2,), 3, 40)
    rows = train.create_tuple_iterator(output_numpy=True)
    data, label = next(rows)
    assert data.dtype == np.float32 and label.dtype == np.int32 and data.shape == (4, 2)
    assert train.get_dataset_size() == 10
    # Workers forked from a job's threads can hang; in-memory rows are read by one worker.
    assert multiprocessing.active_children() == []


def test_a_dataset_is_sharded_by_its_sampler_and_shuffled(user_module):
    cfg = option(f"{user_module}.indexed", shuffle=False, num_classes=5)
    ranks = [firsts(create_datasets(cfg, Shard(2, rank))[0]) for rank in range(2)]
    assert all(len(seen) == 20 for seen in ranks)
    assert sorted(ranks[0] + ranks[1]) == list(range(40))
    train, _, spec = create_datasets(option(f"{user_module}.indexed"))
    assert (spec.image_shape, spec.num_classes) == ((3,), 5)  # classes from one pass
    assert sorted(firsts(train)) == list(range(40)) and firsts(train) != list(range(40))


def test_a_stream_cannot_be_sharded_and_says_so(user_module):
    with pytest.raises(ConfigError) as refused:
        create_datasets(option(f"{user_module}.streamed"), Shard(2, 0))
    assert str(refused.value).startswith(
        f"dataset._target_='{user_module}.streamed': returned a dataset ms_exp cannot shard"
    )
