"""A plain MindSpore script, recorded in MLflow by one line: ``ms_exp.autolog()``.

A small LeNet-style network learns scikit-learn's 8x8 handwritten digits with Model.fit,
evaluating after every epoch and keeping checkpoints with ModelCheckpoint; nothing in it
knows about ms_exp or MLflow beyond the two lines at the top. About 20 s on a CPU:

    python examples/autolog/train_digits.py
    mlflow ui --backend-store-uri sqlite:///$PWD/mlflow.db --host 127.0.0.1 --port 5000
"""

import argparse

import mindspore as ms
import numpy as np
from mindspore import dataset as ds
from mindspore import nn
from mindspore.train import Accuracy, CheckpointConfig, Loss, LossMonitor, Model, ModelCheckpoint
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import ms_exp

# Every Model.train / Model.fit call from here on is an MLflow run.
ms_exp.autolog()


class LeNet(nn.Cell):
    """LeNet's shape scaled to 8x8 images: two convolutions, two dense layers."""

    def __init__(self, num_classes: int = 10):
        super().__init__()
        self.features = nn.SequentialCell(
            nn.Conv2d(1, 8, 3, pad_mode="same"),
            nn.ReLU(),
            nn.MaxPool2d(2, 2),
            nn.Conv2d(8, 16, 3, pad_mode="same"),
            nn.ReLU(),
            nn.MaxPool2d(2, 2),
        )
        self.classifier = nn.SequentialCell(
            nn.Flatten(), nn.Dense(16 * 2 * 2, 64), nn.ReLU(), nn.Dense(64, num_classes)
        )

    def construct(self, x):
        return self.classifier(self.features(x))


def datasets(batch_size: int):
    """Train and eval datasets of the digits: 1437 and 360 images, scaled to [0, 1]."""
    digits = load_digits()
    images = (digits.images / 16.0).astype(np.float32)[:, np.newaxis]
    labels = digits.target.astype(np.int32)
    train_x, eval_x, train_y, eval_y = train_test_split(
        images, labels, test_size=0.2, random_state=0, stratify=labels
    )
    train = ds.NumpySlicesDataset((train_x, train_y), ["image", "label"], shuffle=True)
    valid = ds.NumpySlicesDataset((eval_x, eval_y), ["image", "label"], shuffle=False)
    return (
        train.batch(batch_size, drop_remainder=True),
        valid.batch(batch_size, drop_remainder=False),
    )


def build_model(learning_rate: float) -> Model:
    network = LeNet()
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    optimizer = nn.Momentum(
        network.trainable_params(), learning_rate=learning_rate, momentum=0.9, weight_decay=1e-4
    )
    return Model(network, loss, optimizer, metrics={"accuracy": Accuracy(), "loss": Loss()})


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--checkpoint-dir", default="checkpoints")
    args = parser.parse_args(argv)

    ms.set_seed(1)
    ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
    train, valid = datasets(args.batch_size)
    model = build_model(args.lr)
    saving = CheckpointConfig(save_checkpoint_steps=train.get_dataset_size(), keep_checkpoint_max=5)
    callbacks = [
        LossMonitor(20),
        ModelCheckpoint(prefix="lenet", directory=args.checkpoint_dir, config=saving),
    ]
    model.fit(args.epochs, train, valid, callbacks=callbacks)
    print("final evaluation:", model.eval(valid))


if __name__ == "__main__":
    main()
