"""What a MindSpore user writes by hand for ms_exp's default job, in the tutorials' style:
constants and argparse, the tutorials' Network (Dense cells from ops.MatMul/ops.Add),
scikit-learn's digits with the same split and pipeline, Momentum, CrossEntropyLoss,
``Model.fit`` evaluating accuracy, top-5 accuracy and loss after every epoch, with
LossMonitor, TimeMonitor and ModelCheckpoint (every epoch, the last 5 kept): what the
default job does. No ms_exp import: this is the baseline the framework is measured against
(benchmarks/overhead.py).

    python benchmarks/baselines/plain_digits.py --epochs 10 --ckpt-dir /tmp/plain_ckpt
"""

import argparse

import mindspore as ms
import mindspore.dataset as ds
import numpy as np
from mindspore import nn, ops
from mindspore.common.initializer import initializer
from mindspore.train import CheckpointConfig, LossMonitor, ModelCheckpoint, TimeMonitor

BATCH_SIZE = 32
HIDDEN = 512
LR, MOMENTUM = 0.05, 0.9
MEAN, STD = 0.3053, 0.3760
WORKERS = 1


class Dense(nn.Cell):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.weight = ms.Parameter(initializer("normal", [in_channels, out_channels], ms.float32))
        self.bias = ms.Parameter(initializer("normal", [out_channels], ms.float32))
        self.matmul = ops.MatMul()
        self.add = ops.Add()

    def construct(self, x):
        return self.add(self.matmul(x, self.weight), self.bias)


class Network(nn.Cell):
    def __init__(self):
        super().__init__()
        self.flatten = ops.Flatten()
        self.layer1 = Dense(64, HIDDEN)
        self.relu1 = ops.ReLU()
        self.layer2 = Dense(HIDDEN, HIDDEN)
        self.relu2 = ops.ReLU()
        self.layer3 = Dense(HIDDEN, 10)

    def construct(self, x):
        x = self.relu1(self.layer1(self.flatten(x)))
        x = self.relu2(self.layer2(x))
        return self.layer3(x)


def create_datasets():
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    images = digits.images.astype(np.float32)[..., np.newaxis]
    labels = digits.target.astype(np.int32)
    train_x, eval_x, train_y, eval_y = train_test_split(
        images, labels, test_size=0.2, random_state=0, stratify=labels
    )
    return pipeline(train_x, train_y, shuffle=True), pipeline(eval_x, eval_y, shuffle=False)


def pipeline(images, labels, shuffle):
    # One worker, as the default job's dataset.num_parallel_workers: MindSpore's default
    # (8) would spend this 2-core machine's CPU on threads that have nothing to do.
    dataset = ds.NumpySlicesDataset(
        {"image": images, "label": labels}, shuffle=shuffle, num_parallel_workers=WORKERS
    )
    dataset = dataset.map(
        [
            ds.vision.Rescale(1 / 16.0, 0.0),
            ds.vision.Normalize(mean=(MEAN,), std=(STD,)),
            ds.vision.HWC2CHW(),
        ],
        "image",
        num_parallel_workers=WORKERS,
    )
    dataset = dataset.map(ds.transforms.TypeCast(ms.int32), "label", num_parallel_workers=WORKERS)
    return dataset.batch(BATCH_SIZE, drop_remainder=shuffle)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--ckpt-dir", default="./checkpoints")
    parser.add_argument("--print-every", type=int, default=1)
    args = parser.parse_args()
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_seed(1)
    dataset, eval_dataset = create_datasets()
    network = Network()
    optimizer = nn.Momentum(network.trainable_params(), learning_rate=LR, momentum=MOMENTUM)
    metrics = {"accuracy": nn.Accuracy(), "top_5_accuracy": nn.Top5CategoricalAccuracy()}
    model = ms.Model(
        network,
        loss_fn=nn.CrossEntropyLoss(),
        optimizer=optimizer,
        metrics={**metrics, "loss": nn.Loss()},
    )
    config = CheckpointConfig(
        save_checkpoint_steps=dataset.get_dataset_size(), keep_checkpoint_max=5
    )
    callbacks = [
        LossMonitor(args.print_every),
        TimeMonitor(),
        ModelCheckpoint(prefix="checkpoint", directory=args.ckpt_dir, config=config),
    ]
    model.fit(args.epochs, dataset, eval_dataset, callbacks=callbacks, dataset_sink_mode=False)


if __name__ == "__main__":
    main()
