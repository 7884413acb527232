"""A progress bar over each epoch's steps, shown only where a person is watching."""

import sys
from typing import Any, Optional, TextIO

from mindspore.train import Callback


def wants_progress_bar(setting: str, stream: Optional[TextIO] = None) -> bool:
    stream = stream or sys.stdout
    if setting == "auto":
        return hasattr(stream, "isatty") and stream.isatty()
    return setting == "always"


class ProgressBar(Callback):
    def __init__(self, steps_per_epoch: int, epochs: int):
        super().__init__()
        self.steps_per_epoch = steps_per_epoch
        self.epochs = epochs
        self._bar: Optional[Any] = None

    def on_train_epoch_begin(self, run_context: Any) -> None:
        from tqdm import tqdm

        epoch = run_context.original_args().cur_epoch_num
        self._bar = tqdm(
            total=self.steps_per_epoch,
            desc=f"epoch {epoch}/{self.epochs}",
            unit="step",
            leave=False,
            dynamic_ncols=True,
        )

    def on_train_step_end(self, run_context: Any) -> None:
        if self._bar is not None:
            self._bar.update(1)

    def on_train_epoch_end(self, run_context: Any) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
