"""Components by ``_target_``: any MindSpore optimizer, loss Cell,
callback and metric named in the config with its own arguments beside it, checked before
anything runs, trained by both loops and recorded in MLflow; the built-in names go through
the same path."""

from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import main_in_process, train

from ms_exp.run import main

ERROR = "ms_exp: error: "

# A user's project: what the config names by _target_, importable from PYTHONPATH.
COMPONENTS = '''
from pathlib import Path

from mindspore import nn
from mindspore.train import Callback, Metric


class EpochFile(Callback):
    """Appends "<tag> <epoch>" to ``path`` after every training epoch."""

    def __init__(self, path, tag="run"):
        super().__init__()
        self.path, self.tag = Path(path), tag

    def on_train_epoch_end(self, run_context):
        with self.path.open("a") as out:
            out.write(f"{self.tag} {run_context.original_args().cur_epoch_num}\\n")


class NotACallback:
    def __init__(self, path="unused"):
        self.path = path


class SampleCount(Metric):
    """Samples evaluated, plus num_classes / 1000 to show ms_exp passed it."""

    def __init__(self, num_classes):
        super().__init__()
        self.num_classes = num_classes
        self.clear()

    def clear(self):
        self.count = 0

    def update(self, *inputs):
        self.count += self._convert_data(inputs[1]).shape[0]

    def eval(self):
        return self.count + self.num_classes / 1000


class SparseFocal(nn.Cell):
    """mindspore.nn.FocalLoss for class-index labels (it wants them (N, 1))."""

    def __init__(self, gamma=2.0):
        super().__init__()
        self.focal = nn.FocalLoss(gamma=gamma)

    def construct(self, logits, labels):
        return self.focal(logits, labels.reshape(-1, 1))


def named_mlp(input_shape, num_classes, hidden_size, weight_init="normal", version=1):
    """A network factory that names itself by its version, as networks in the wild do."""
    name = "mlp-v%d" % version
    features = 1
    for size in input_shape:
        features *= size
    return nn.SequentialCell([nn.Flatten(), nn.Dense(features, hidden_size),
                              nn.Dense(hidden_size, num_classes)])
'''

TINY = (
    "dataset=synthetic",
    "dataset.num_samples=64",
    "dataset.num_eval_samples=32",
    "dataset.batch_size=32",
    "trainer.epochs=2",
)
ADAMW = (
    "optimizer._target_=mindspore.nn.AdamWeightDecay",
    "+optimizer.beta1=0.8",
    "optimizer.lr=0.001",
)


@pytest.fixture(scope="module")
def components(tmp_path_factory):
    folder = tmp_path_factory.mktemp("user_project")
    (folder / "my_components.py").write_text(COMPONENTS)
    return folder


def callbacks(folder, tag: str) -> str:
    """Two callbacks of the user's, the second to be removed by the command line."""
    return (
        f"+trainer.callbacks={{epochs:{{_target_:my_components.EpochFile,"
        f"path:{folder}/{tag}.txt,tag:{tag}}},gone:{{_target_:my_components.EpochFile,"
        f"path:{folder}/gone.txt}}}}"
    )


@pytest.fixture(scope="module")
def runs(components, tmp_path_factory):
    """One tiny run per loop: AdamW with its own beta1, a user's loss (whole, or as a
    part), a user's callback and metric; the other callback removed two ways."""
    root = tmp_path_factory.mktemp("runs")
    env = {"PYTHONPATH": str(components)}
    common = (*TINY, *ADAMW, "+trainer.metrics.samples._target_=my_components.SampleCount")
    model = train(
        root / "model",
        *common,
        "loss._target_=my_components.SparseFocal",
        "+loss.gamma=1.5",
        callbacks(root, "model"),
        "~trainer.callbacks.gone",
        env=env,
    )
    functional = train(
        root / "functional",
        *common,
        "trainer.loop=functional",
        "+loss.parts={focal:{_target_:my_components.SparseFocal,gamma:1.5,"
        "weight:0.5},ce:{name:cross_entropy}}",
        callbacks(root, "functional"),
        "trainer.callbacks.gone=null",
        env=env,
    )
    return root, {"model": model, "functional": functional}


@pytest.mark.e2e
def test_targets_train_in_both_loops_and_are_recorded(runs):
    root, results = runs
    for loop, result in results.items():
        run = result.store.get_run(result.run_id)
        params = run.data.params
        assert params["optimizer._target_"] == "mindspore.nn.AdamWeightDecay"
        assert params["optimizer.beta1"] == "0.8"
        assert params["trainer.callbacks.epochs._target_"] == "my_components.EpochFile"
        assert params["trainer.metrics.samples._target_"] == "my_components.SampleCount"
        # AdamWeightDecay's own state in the checkpoint: not the default Momentum's.
        import mindspore as ms

        saved = ms.load_checkpoint(str(result.run_dir / "checkpoints/rank_0/checkpoint-2_2.ckpt"))
        assert any(name.startswith("adam_m.") for name in saved), loop
        assert not any(name.startswith("moments.") for name in saved), loop
        # The user's callback ran in this loop after each epoch; the removed one never did.
        assert (root / f"{loop}.txt").read_text().split("\n")[:2] == [f"{loop} 1", f"{loop} 2"]
        # The user's metric after each evaluation, given the dataset's 10 classes.
        history = result.store.get_metric_history(result.run_id, "eval/samples")
        assert sorted(m.step for m in history) == [2, 4]
        assert {m.value for m in history} == {32.01}
        assert np.isfinite(run.data.metrics["train/loss"])
    assert not (root / "gone.txt").exists()
    model, functional = results["model"], results["functional"]
    # The records name what was built: no built-in name beside a _target_.
    for result in results.values():
        assert result.store.get_run(result.run_id).data.params["optimizer.name"] == "null"
    saved = yaml.safe_load((model.run_dir / "config.yaml").read_text())
    assert saved["loss"]["name"] is None and saved["optimizer"]["name"] is None
    parts = yaml.safe_load((functional.run_dir / "config.yaml").read_text())["loss"]["parts"]
    assert parts["focal"].get("name") is None and parts["ce"]["name"] == "cross_entropy"
    assert (
        model.store.get_run(model.run_id).data.params["loss._target_"]
        == "my_components.SparseFocal"
    )
    assert model.store.get_run(model.run_id).data.params["loss.gamma"] == "1.5"
    # A part by _target_ beside a named one, each its own metric.
    assert functional.store.get_metric_history(functional.run_id, "train/focal")
    assert functional.store.get_metric_history(functional.run_id, "train/ce")


BAD = {
    "unknown argument of the optimizer": (
        [*ADAMW, "+optimizer.nosuch=1"],
        "optimizer.nosuch=1: is not an argument of the target; expected a parameter of "
        "mindspore.nn.AdamWeightDecay: params, learning_rate, beta1, beta2, eps, "
        "weight_decay",
    ),
    "target arguments without a target": (
        ["+optimizer.beta1=0.8"],
        "optimizer.beta1=0.8: unknown key; expected one of name, lr, momentum, weight_decay, "
        "schedule, warmup_epochs, min_lr, lr_init, decay_epochs, group_params, _target_ "
        "(other keys only beside a _target_: its own arguments)",
    ),
    "missing argument of a callback": (
        ["+trainer.callbacks.epochs._target_=my_components.EpochFile"],
        "trainer.callbacks.epochs.path='missing': not allowed; expected a value: "
        "my_components.EpochFile requires 'path' (its parameters: path, tag)",
    ),
    "callback target that is not a callback": (
        ["+trainer.callbacks.epochs._target_=my_components.NotACallback"],
        "trainer.callbacks.epochs._target_='my_components.NotACallback': is the class "
        "NotACallback; expected a mindspore.train.Callback",
    ),
    "metric target that is not a metric": (
        ["+trainer.metrics.samples._target_=my_components.NotACallback"],
        "trainer.metrics.samples._target_='my_components.NotACallback': is the class "
        "NotACallback; expected a mindspore.train.Metric",
    ),
    "optimizer target that is not an optimizer": (
        ["optimizer._target_=mindspore.nn.Dense"],
        "optimizer._target_='mindspore.nn.Dense': is not an optimizer; expected a subclass "
        "of mindspore.nn.Optimizer",
    ),
    "optimizer without the loss scale amp needs it to divide by": (
        [*ADAMW, "amp.loss_scale=fixed"],
        "optimizer._target_='mindspore.nn.AdamWeightDecay': takes no loss_scale; expected an "
        "optimizer taking loss_scale with amp.loss_scale=fixed and trainer.loop=model, or "
        "amp.drop_overflow_update=true, amp.loss_scale=dynamic or trainer.loop=functional "
        "(the scaled step unscales the gradients itself)",
    ),
    "loss part argument its target does not take": (
        ["+loss.parts.focal._target_=my_components.SparseFocal", "+loss.parts.focal.alpha=1"],
        "loss.parts.focal.alpha=1: is not an argument of the target; expected a parameter "
        "of my_components.SparseFocal: gamma",
    ),
    # An error inside the user's own code names what the config passed it, then the error.
    "user network that fails on a value of its own key": (
        ["model._target_=my_components.named_mlp", "+model.version=abc"],
        "model._target_='my_components.named_mlp': failed to build with model.hidden_size=512, "
        "model.weight_init='normal', model.version='abc': TypeError: %d format: a real number "
        "is required, not str; expected values of these keys that my_components.named_mlp "
        "accepts",
    ),
    "rank_zero_only of a callback that is not a bool": (
        [
            "+trainer.callbacks.epochs._target_=my_components.EpochFile",
            "+trainer.callbacks.epochs.path=epochs.txt",
            "+trainer.callbacks.epochs.rank_zero_only=maybe",
        ],
        "trainer.callbacks.epochs.rank_zero_only='maybe': not allowed; expected true or false",
    ),
    "loss target that does not import": (
        ["loss._target_=my_components.NoSuchLoss"],
        "loss._target_='my_components.NoSuchLoss': does not import",
    ),
}


@pytest.mark.parametrize("argv,message", BAD.values(), ids=list(BAD))
def test_a_bad_component_is_refused_in_one_line_before_anything_exists(
    argv, message, components, tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(components))
    assert main(["trainer.progress_bar=never", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(ERROR + message), err
    assert list(tmp_path.iterdir()) == []  # no outputs/, no mlflow.db


def test_built_in_names_are_target_configs_built_the_same_way():
    from mindspore import nn

    from ms_exp.preflight.compose import compose_config
    from ms_exp.train.losses import CrossEntropySmooth, create_loss
    from ms_exp.train.optimizer import create_optimizer

    network = nn.Dense(4, 3)
    cfg = compose_config(["amp.loss_scale=fixed"])
    momentum = create_optimizer(cfg.optimizer, network, 2, 1, loss_scale=8.0)
    assert type(momentum) is nn.Momentum and momentum.loss_scale == 8.0
    assert np.isclose(float(momentum.momentum.asnumpy()), 0.9)
    sgd = create_optimizer(compose_config(["optimizer.name=sgd"]).optimizer, network, 2, 1)
    assert type(sgd) is nn.SGD
    smooth = create_loss(
        compose_config(["loss.name=cross_entropy_smooth", "loss.label_smoothing=0.1"]).loss, 5
    )
    assert type(smooth) is CrossEntropySmooth  # given num_classes: 0.1 / 4 off the label
    assert np.isclose(float(smooth.off_value.asnumpy()), 0.025)


def test_user_callbacks_run_on_every_rank_but_those_rank_zero_only(
    components, tmp_path, monkeypatch
):
    """What each rank of a distributed job builds of ``trainer.callbacks`` (rank 0 and
    rank 1 of 2): every callback but those ``rank_zero_only``, a key of ms_exp's that the
    target is not given (EpochFile takes only path and tag)."""
    monkeypatch.syspath_prepend(str(components))
    from ms_exp.preflight.components import validate_callbacks
    from ms_exp.preflight.compose import compose_config
    from ms_exp.train.callbacks import user_callbacks

    def entry(tag: str, rank_zero_only: str = "") -> str:
        only = f",rank_zero_only:{rank_zero_only}" if rank_zero_only else ""
        return f"{tag}:{{_target_:my_components.EpochFile,path:{tmp_path}/{tag}.txt{only}}}"

    cfg = compose_config(
        [
            f"+trainer.callbacks={{{entry('every')},{entry('once', 'true')},"
            f"{entry('each', 'false')}}}"
        ]
    )
    validate_callbacks(cfg.trainer)
    for rank, built in (0, ["every", "once", "each"]), (1, ["every", "each"]):
        callbacks = user_callbacks(cfg.trainer, rank)
        assert [callback.path.stem for callback in callbacks] == built, rank


def test_ranks_other_than_0_write_no_file_all_ranks_share(tmp_path):
    """The built-in callbacks of rank 1 of a 2-rank job: no weight snapshots (one folder
    for the run), no progress bar, a best.ckpt it does not keep, MLflow's metrics on a
    disabled tracker; its checkpoints go into its own folder."""
    from mindspore import nn

    from ms_exp.checkpoint.callbacks import BestCheckpoint, TimedModelCheckpoint, WeightSnapshots
    from ms_exp.checkpoint.files import rank_dir
    from ms_exp.preflight.compose import compose_config
    from ms_exp.tracking.lifecycle import DisabledTracker
    from ms_exp.train.callbacks import create_callbacks
    from ms_exp.train.context import Runtime
    from ms_exp.train.progress import ProgressBar

    cfg = compose_config(["trainer.progress_bar=always", "checkpoint.snapshots.per_epoch=1"])
    kinds = {}
    for rank in (0, 1):
        runtime = Runtime("CPU", "graph", 0, rank, 2, "data")
        fit = create_callbacks(
            cfg,
            nn.Dense(4, 2),
            runtime,
            tmp_path,
            rank_dir(tmp_path, rank),
            DisabledTracker(),
            4,
            0,
            [],
            "accuracy",
            {},
        )
        kinds[rank] = {type(callback) for callback in fit.callbacks}
        assert fit.best is not None and fit.best.keep == (rank == 0)
        assert (
            fit.saver is not None
            and Path(fit.saver._directory) == rank_dir(tmp_path, rank).resolve()
        )
    assert {WeightSnapshots, ProgressBar, BestCheckpoint, TimedModelCheckpoint} <= kinds[0]
    assert kinds[0] - kinds[1] == {WeightSnapshots, ProgressBar}


@pytest.mark.e2e  # in process, but seconds long: docs/developing.md#lanes
def test_cfg_job_shows_no_built_in_name_beside_a_target(tmp_path):
    """``--cfg job`` prints the config the job uses: a user's loss or optimizer by
    ``_target_`` has ``name: null``; otherwise it is Hydra's own print, byte for byte."""

    def shown(*args):
        result = main_in_process("ms_exp.run", ["--cfg", "job", *args], tmp_path)
        assert result.rc == 0, result.stderr
        return result.stdout

    user = yaml.safe_load(shown("loss._target_=mindspore.nn.MSELoss", *ADAMW))
    assert user["loss"]["name"] is None and user["loss"]["_target_"] == "mindspore.nn.MSELoss"
    assert user["optimizer"]["name"] is None and user["optimizer"]["beta1"] == 0.8
    default = yaml.safe_load(shown())
    assert default["loss"]["name"] == "cross_entropy" and default["optimizer"]["name"] == "momentum"
    # --package goes to Hydra, which prints the same config for the built-in names.
    assert shown("trainer.epochs=3") == shown("trainer.epochs=3", "--package", "_global_")
    # Resolved as the job resolves it: a path in the run folder is in one (Hydra's own
    # print leaves the folder unset, "None/strategy.ckpt").
    resolved = yaml.safe_load(shown("--resolve"))
    assert (
        Path(resolved["checkpoint"]["strategy"]["save_file"]).parent.parent.parent.name == "outputs"
    )


def test_a_loss_or_optimizer_with_neither_name_nor_target_is_refused(tmp_path):
    for key, allowed in (
        ("loss", "a built-in loss (cross_entropy"),
        ("optimizer", "a built-in optimizer (sgd, momentum, adam)"),
    ):
        result = main_in_process("ms_exp.run", [f"{key}.name=null"], tmp_path)
        assert result.rc == 2
        assert result.stderr.startswith(
            f"ms_exp: error: {key}.name=null: not allowed; expected {allowed}"
        )
