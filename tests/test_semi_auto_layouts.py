"""Semi-auto checkpoints on CPU, in this process: each checkpoint ModelCheckpoint leaves is
replaced by this rank's slice under the shard strategy, ``best.ckpt`` stays whole, and rank
0 writes the strategy file (the job that does it on two ranks: tests/test_semi_auto.py)."""

from types import SimpleNamespace

import mindspore as ms
import numpy as np

from ms_exp.checkpoint.files import load_verified
from ms_exp.models.mlp import Network
from ms_exp.parallel.emulation import SemiAutoLayouts, apply_strategies

STRATEGIES = {"layer1": {"matmul": [[1, 1], [1, 2]]}}  # layer1's weight split on its columns


def test_each_new_checkpoint_becomes_this_ranks_slice_and_rank_0_writes_the_strategy(tmp_path):
    network = Network(16, 10, 8)
    apply_strategies(network, STRATEGIES)
    full = network.layer1.weight.asnumpy()
    for rank in (0, 1):
        folder = tmp_path / f"rank_{rank}"
        folder.mkdir()
        layouts = SemiAutoLayouts(
            network,
            STRATEGIES,
            device_num=2,
            rank_id=rank,
            directory=folder,
            prefix="checkpoint",
            strategy_file=str(tmp_path / f"strategy_{rank}.ckpt"),
            slice_files=True,
            save_steps=2,
        )
        step = SimpleNamespace(
            original_args=lambda: SimpleNamespace(train_network=network, cur_step_num=2)
        )
        layouts.on_train_begin(step)
        ms.save_checkpoint(network, str(folder / "checkpoint-1_2.ckpt"), crc_check=True)
        ms.save_checkpoint(network, str(folder / "best.ckpt"), crc_check=True)
        layouts.on_train_step_end(step)
        part = load_verified(folder / "checkpoint-1_2.ckpt")["layer1.weight"].asnumpy()
        assert part.shape == (16, 4)
        np.testing.assert_array_equal(part, full[:, 4 * rank : 4 * (rank + 1)])
        assert load_verified(folder / "best.ckpt")["layer1.weight"].shape == (16, 8)
    assert (tmp_path / "strategy_0.ckpt").is_file()
    assert not (tmp_path / "strategy_1.ckpt").exists()
