"""The project's callback: appends a line per finished epoch to a file in the run dir."""

from pathlib import Path

from mindspore.train import Callback


class EpochLog(Callback):
    def __init__(self, path: str = "epochs.log"):
        super().__init__()
        self.path = Path(path)

    def on_train_epoch_end(self, run_context):
        params = run_context.original_args()
        with self.path.open("a") as log:
            log.write(f"epoch {params.cur_epoch_num} loss {params.net_outputs}\n")
