"""Typed schemas for every config group, registered in Hydra's ConfigStore.

Each YAML option in ``conf/<group>/<option>.yaml`` starts from the schema stored here as
``schema/<group>/<option>`` (``defaults: [/schema/<group>/<option>@_here_, _self_]``), so
Hydra itself refuses an unknown key or a value of the wrong type while composing, before
anything runs. Closed choices are Enums so that the refusal lists the allowed values.
Range and path checks that a type cannot express live in ``ms_exp.preflight``. One cohesive
module: the schemas nest and are registered together, and their field comments are each
key's documentation (tools/config_reference.py writes them out).
"""

import dataclasses
import warnings
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Dict, List, Optional, Tuple, cast

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf

from ms_exp.config.resolvers import register_resolvers
from ms_exp.config.targets import TARGET, target_path

# The optimizer and loss sections hold their target's own arguments beside the typed keys,
# which OmegaConf admits for a class subclassing ``Dict`` with a deprecation warning no user
# could act on (https://github.com/omry/omegaconf/issues/663).
warnings.filterwarnings(
    "ignore",
    message=r"Class `(OptimizerConfig|LossConfig|LossPart)` subclasses `Dict`",
    category=UserWarning,
)


class ContextMode(Enum):
    graph = "graph"  # GRAPH_MODE: the network compiled into a static graph (faster steps)
    pynative = "pynative"  # PYNATIVE_MODE: operators run one by one (easier to debug)


class CheckpointFormat(Enum):
    ckpt = "ckpt"  # MindSpore's protobuf `.ckpt`, written with its CRC32
    # `.safetensors`, which MindSpore writes without a CRC: ms_exp records a SHA-256 beside each
    safetensors = "safetensors"


class ProgressBar(Enum):
    auto = "auto"  # only when stdout is a terminal, never in CI logs
    always = "always"  # also when stdout is not a terminal (logs, CI)
    never = "never"


class TrainLoop(Enum):
    model = "model"  # Model.fit: MindSpore's TrainOneStepCell (or its loss-scaled variant)
    functional = "functional"  # the training-flow tutorial's value_and_grad + jit step


class AmpLevel(Enum):
    """``amp_level`` of ``Model`` / ``mindspore.amp.auto_mixed_precision``."""

    O0 = "O0"  # float32 throughout
    O1 = "O1"  # float16 for the white-listed operators (Conv2d, Dense, ...)
    O2 = "O2"  # float16 but the black list (batch norm stays float32 by default)
    O3 = "O3"  # float16 throughout


class LossScaleKind(Enum):
    none = "none"  # no loss scaling
    fixed = "fixed"  # FixedLossScaleManager / StaticLossScaler
    dynamic = "dynamic"  # DynamicLossScaleManager / DynamicLossScaler


class OptimizerName(Enum):
    sgd = "sgd"  # mindspore.nn.SGD without momentum
    momentum = "momentum"  # mindspore.nn.Momentum
    adam = "adam"  # mindspore.nn.Adam


class LrSchedule(Enum):
    constant = "constant"  # a flat lr after the warmup
    linear = "linear"  # linear decay from lr to min_lr (the model zoo ResNet's get_lr)
    cosine = "cosine"  # the model zoo ResNet's cosine decay from lr to about 0


class LossName(Enum):
    cross_entropy = "cross_entropy"  # nn.CrossEntropyLoss, as the model-saving tutorial
    softmax_cross_entropy = "softmax_cross_entropy"  # sparse, as the training-flow tutorial
    # The model zoo ResNet's CrossEntropySmooth (the dimension-reduction tutorial's loss):
    # 1 - label_smoothing on the label, label_smoothing / (classes - 1) on each other class.
    cross_entropy_smooth = "cross_entropy_smooth"


class CheckpointArtifacts(Enum):
    all = "all"  # every checkpoint of every rank
    last = "last"  # the final and the best checkpoint
    none = "none"  # no checkpoint artifacts; the files stay in the run directory


# --- parallel --------------------------------------------------------------------------


class SearchMode(Enum):
    """``search_mode`` of AUTO_PARALLEL."""

    # Propagates the strategies set with Cell.shard to the operators without one.
    sharding_propagation = "sharding_propagation"
    dynamic_programming = "dynamic_programming"  # a cost-model search over the whole graph
    recursive_programming = "recursive_programming"  # a quicker search for large networks


class LaunchStyle(Enum):
    """How the ranks are started (ms_exp/job/launch_plan.py renders each style and
    ms_exp/job/supervise.py runs it)."""

    msrun = "msrun"  # MindSpore's own launcher: every device target, CPU included
    # Open MPI's: GPU and Ascend (MindSpore 2.10 trains no CPU ranks there:
    # docs/design.md#mpirun-on-cpu)
    mpirun = "mpirun"
    rank_table = "rank_table"  # one process per rank with RANK_TABLE_FILE: Ascend (HCCL) only


@dataclass
class LauncherConfig:
    """How the ranks are started, and msrun's arguments. One node: leave the defaults.
    Several nodes: the same command on every node with its own ``node_rank`` and
    ``local_worker_num``."""

    style: LaunchStyle = LaunchStyle.msrun  # what starts the ranks
    # style=rank_table, as the training-flow tutorial's Ascend script: the rank table
    # (RANK_TABLE_FILE, hccl_<n>p_*.json) listing one device per rank, on this server.
    rank_table_file: Optional[str] = None
    # style=rank_table: the first rank's DEVICE_ID (the script's START_ID); rank i gets
    # DEVICE_ID=start_device_id+i and RANK_ID=i.
    start_device_id: int = 0
    # style=mpirun: arguments after ms_exp's own, e.g. [--hostfile, hosts, --bind-to, none].
    mpirun_args: List[str] = field(default_factory=list)
    # msrun's arguments (style=msrun); log_dir and join_timeout are read by every style.

    worker_num: Optional[int] = None  # all workers: None or parallel.device_num (one per device)
    # Workers on this node (fewer than worker_num: several nodes); None: worker_num.
    local_worker_num: Optional[int] = None
    node_rank: int = -1  # this node's rank, 0 to nodes - 1; -1: msrun assigns ranks (one node)
    master_addr: str = "127.0.0.1"  # msrun's scheduler, on node 0 (one node: this machine)
    # The scheduler's port, 1024 to 65535 and free; null: a free port chosen when the job
    # launches (one node only: the nodes of a multi-node job must agree on one).
    master_port: Optional[int] = None
    log_dir: str = "log_output"  # the ranks' logs; relative paths are inside the run directory
    cluster_time_out: int = 600  # seconds msrun waits for every worker to join, >= 1
    # Seconds a rank may outlive a failed one before the rest are stopped.
    join_timeout: int = 30


@dataclass
class StandAloneParallel:
    mode: str = "stand_alone"  # the option's parallel mode (pick another with parallel=...)
    device_num: int = 1  # one process, one device (the only value allowed)


@dataclass
class DataParallel:
    mode: str = "data"  # the option's parallel mode (pick another with parallel=...)
    device_num: int = 2  # ranks, one process and one device each
    gradients_mean: bool = True  # average the all-reduced gradients (false: sum them)
    # Increasing gradient indices where all-reduce fusion groups split, e.g. [20, 35];
    # []: MindSpore's default fusion.
    all_reduce_fusion_config: List[int] = field(default_factory=list)
    launcher: LauncherConfig = field(default_factory=LauncherConfig)


@dataclass
class SemiAutoParallel(DataParallel):
    mode: str = "semi_auto"
    device_num: int = 8
    full_batch: bool = False  # every rank reads the whole batch; false: each reads its shard
    # Operator path -> shard strategy, e.g. {layer1: {matmul: [[2, 1], [1, 2]]}}.
    strategies: Dict[str, Any] = field(default_factory=dict)


@dataclass
class AutoParallel(DataParallel):
    mode: str = "auto"
    device_num: int = 8
    full_batch: bool = False  # every rank reads the whole batch; false: each reads its shard
    search_mode: SearchMode = SearchMode.sharding_propagation  # how the strategies are found


# --- checkpoint ------------------------------------------------------------------------


@dataclass
class StrategyFile:
    """``strategy_ckpt_config`` of ``mindspore.set_auto_parallel_context``."""

    # Where MindSpore writes the strategy file (semi_auto, auto); '': nowhere. A relative
    # path is inside the run directory.
    save_file: str = ""
    load_file: str = ""  # a strategy file to read the layouts from ('': none); must exist
    only_trainable_params: bool = True  # the file holds the trainable parameters' layouts only


@dataclass
class WeightSnapshots:
    """Weight-only snapshots (``CheckpointConfig(saved_network=network)``) for stage one of
    dimension-reduction training: their PCA spans the subspace stage two trains in."""

    per_epoch: int = 0  # snapshots per epoch into `<run dir>/snapshots`; 0: no snapshots
    # The tutorial drops early weights: snapshots from this epoch on (1 to trainer.epochs).
    start_epoch: int = 1
    keep_max: int = 100  # snapshots kept, the oldest deleted first (>= 1)


@dataclass
class CheckpointSchema:
    save: bool = True  # ModelCheckpoint every interval; false: none (evaluation still runs)
    # true: every rank saves the full, merged weights; false: only its own slice, the strategy
    # file saying how the slices fit together (CheckpointConfig(integrated_save)).
    integrated_save: bool = True
    # Files `<prefix>-<epoch>_<step>.ckpt` in `<run dir>/checkpoints/rank_<r>`; no slashes.
    prefix: str = "checkpoint"
    # None: every save_checkpoint_epochs epochs (once per epoch by default, as the
    # training-flow tutorial; the model zoo ResNet's save_checkpoint_epochs * steps).
    save_checkpoint_steps: Optional[int] = None
    save_checkpoint_epochs: int = 1  # save every this many epochs (1 when steps are set)
    keep_checkpoint_max: int = 5  # checkpoints kept per rank, the oldest deleted first
    keep_best: bool = True  # best.ckpt: the weights of the best eval accuracy, beside the rest
    # The file format of every checkpoint the run writes (best and sliced ones too); a run
    # reads either whatever this says.
    format: CheckpointFormat = CheckpointFormat.ckpt
    # true: ModelCheckpoint writes each file in a background thread while training goes on
    # (CheckpointConfig(async_save)); the older checkpoints are removed only once it is
    # written, so a save killed half-way leaves the previous one to resume from.
    async_save: bool = False
    # parallel=data only: each rank saves only its share of the weights every rank holds
    # (CheckpointConfig(remove_redundancy)). Resumed on the same number of ranks; merged
    # into one file (`ms_exp.ckpt merge`) to evaluate on one device.
    remove_redundancy: bool = False
    # true: when training raises (an error, or ms_exp's own stop on SIGTERM or Ctrl-C),
    # MindSpore's Model writes the weights as they are then to
    # `<prefix>-<epoch>_<step>_breakpoint.ckpt` (CheckpointConfig(exception_save)), without a
    # CRC; trainer.resume=auto continues from it when it is newer than the last checkpoint
    # and reads back whole. trainer.loop=model and checkpoint.format=ckpt only.
    exception_save: bool = False
    strategy: StrategyFile = field(default_factory=StrategyFile)
    snapshots: WeightSnapshots = field(default_factory=WeightSnapshots)


# --- boost -----------------------------------------------------------------------------


@dataclass
class BoostOff:
    mode: str = "off"  # the option's boost mode (pick another with boost=...)
    level: str = "O0"  # Model(boost_level=...): O0 disables every boost algorithm


@dataclass
class BoostDimReduce:
    """Stage two of dimension-reduction training: mindspore.boost's DimReduce (quasi-Newton
    steps with line search in the span of the stage-one snapshots' principal components).
    The keys below the stage-one source are MindSpore's own ``dim_reduce`` keys."""

    mode: str = "dim_reduce"  # the option's boost mode (pick another with boost=...)
    level: str = "O1"  # AutoBoost level; O1 or O2 (the tutorial uses O1)
    # Stage one: an MLflow run id ("latest": the newest finished run that kept snapshots),
    # or the paths below.
    stage_one_run_id: Optional[str] = None
    pretrained_weight_path: Optional[str] = None  # stage one's final checkpoint
    weight_load_dir: Optional[str] = None  # stage one's snapshot folder
    pca_mat_path: Optional[str] = None  # a PCA matrix (.npy) computed before
    # Principal components spanning the subspace: a multiple of parallel.device_num, at
    # most the number of snapshots.
    n_components: int = 32
    rho: float = 0.55  # in (0, 1): the line search tries steps 1 and rho
    gamma: float = 0.9  # in [0, 1): the residual gradient's momentum
    alpha: float = 0.001  # >= 0: the residual gradient's step
    sigma: float = 0.4  # in (0, 1): the line search's sufficient-decrease factor
    timeout: int = 1800  # seconds a rank waits for rank 0's PCA matrix (>= 1)


# --- placement -------------------------------------------------------------------------


@dataclass
class DevicePlacement:
    mode: str = "device"  # the option's placement (pick another with placement=...)


@dataclass
class HostDevicePlacement:
    """The hybrid-training tutorial: embedding tables (``nn.EmbeddingLookup(target="CPU")``)
    and their sparse optimizers (``optimizer.target = "CPU"``) in host memory, the dense
    layers on the device."""

    mode: str = "host_device"  # the option's placement (pick another with placement=...)


# --- dataset ---------------------------------------------------------------------------


@dataclass
class DatasetCommon:
    batch_size: int = 32  # samples per step on each rank
    shuffle: bool = True  # shuffle the training split every epoch
    num_parallel_workers: int = 1  # reader workers, 1 to the CPU count (arrays: read by one)
    # Drop an epoch's last, incomplete batch: a batch larger than a rank's share of the
    # training split then gives no step, and is refused.
    drop_remainder: bool = True


@dataclass
class DigitsDataset(DatasetCommon):
    _target_: str = "ms_exp.data.digits.digits"  # the function that reads the dataset
    name: str = "digits"  # the dataset's name in run names and tags
    eval_fraction: float = 0.2  # the held-out (stratified) share: the eval set, in (0, 1)
    split_seed: int = 0  # fixed so the held-out split does not move with trainer.seed
    mean: List[float] = field(default_factory=lambda: [0.3053])  # per channel, of pixels in [0, 1]
    std: List[float] = field(default_factory=lambda: [0.3760])  # per channel, > 0


@dataclass
class MnistDataset(DatasetCommon):
    _target_: str = "ms_exp.data.mnist.mnist"  # the function that reads the dataset
    name: str = "mnist"  # the dataset's name in run names and tags
    # The folder of the MNIST idx files (a relative one: in the folder the command runs in);
    # None: the DATA_PATH environment variable, as the model-saving tutorial.
    path: Optional[str] = None
    mean: List[float] = field(default_factory=lambda: [0.1307])  # per channel, of pixels in [0, 1]
    std: List[float] = field(default_factory=lambda: [0.3081])  # per channel, > 0


@dataclass
class ImageNetDataset(DatasetCommon):
    _target_: str = "ms_exp.data.imagenet.imagenet"  # the function that reads the dataset
    name: str = "imagenet"  # the dataset's name in run names and tags
    # The folder holding train_dir and eval_dir (a relative one: in the folder the command
    # runs in); None: DATA_PATH.
    path: Optional[str] = None
    train_dir: str = "train"  # the training split's class folders, under path
    eval_dir: str = "val"  # the eval split's class folders, under path
    image_size: int = 224  # the side of the square images the network reads
    # None: the number of class folders under train_dir.
    num_classes: Optional[int] = None
    # Per channel, of pixels in [0, 255] (the model zoo's).
    mean: List[float] = field(default_factory=lambda: [0.485 * 255, 0.456 * 255, 0.406 * 255])
    # Per channel, > 0, of pixels in [0, 255] (the model zoo's).
    std: List[float] = field(default_factory=lambda: [0.229 * 255, 0.224 * 255, 0.225 * 255])


@dataclass
class SyntheticDataset(DatasetCommon):
    _target_: str = "ms_exp.data.synthetic.synthetic"  # the function that makes the dataset
    name: str = "synthetic"  # the dataset's name in run names and tags
    num_samples: int = 1024  # training samples
    num_eval_samples: int = 256  # eval samples
    image_shape: List[int] = field(default_factory=lambda: [1, 28, 28])  # [channels, h, w] >= 1
    num_classes: int = 10  # classes, >= 2 (one random prototype image each)
    noise: float = 1.0  # the Gaussian noise's standard deviation around the prototypes, >= 0
    data_seed: int = 0  # the same data for every run with the same data_seed


@dataclass
class CriteoDataset(DatasetCommon):
    """MindRecord files written by ``python -m ms_exp.data.criteo_convert`` from Criteo's
    tab-separated text (label, 13 integer fields, 26 hexadecimal categorical fields), each
    record holding the converter's ``--samples-per-record`` samples."""

    _target_: str = "ms_exp.data.criteo.criteo"  # the function that reads the dataset
    name: str = "criteo"  # the dataset's name in run names and tags
    # The converter's output folder (a relative one: in the folder the command runs in);
    # None: DATA_PATH.
    path: Optional[str] = None
    batch_size: int = 1000  # a multiple of the data's samples per record (1000 by default)


# --- model -----------------------------------------------------------------------------


@dataclass
class MlpModel:
    _target_: str = "ms_exp.models.mlp.mlp"  # the function that builds the network
    name: str = "mlp"  # the model's name in run names and tags
    hidden_size: int = 512  # the width of both hidden layers
    weight_init: str = "normal"  # the MindSpore initializer of every weight and bias


@dataclass
class ResNetModel:
    _target_: str = "ms_exp.models.resnet.resnet"  # the function that builds the network
    name: str = "resnet"  # the model's name in run names and tags
    depth: int = 50  # ResNet-18 or ResNet-50; images of at least 32x32
    width: float = 1.0  # scales every channel count, > 0 (0.125 trains in seconds on CPU)


@dataclass
class WideDeepModel:
    """Wide&Deep as in MindSpore's model zoo: a wide linear part and a deep MLP over the
    embeddings of every field, trained with FTRL (wide) and Adam or LazyAdam (deep)."""

    _target_: str = "ms_exp.models.wide_deep.wide_deep"  # the function that builds the network
    name: str = "wide_deep"  # the model's name in run names and tags
    # None: the dataset's vocabulary (criteo_meta.json). Larger allocates bigger tables, as
    # the model zoo's fixed vocab_size does (the scale setting of the hybrid-training tutorial).
    vocab_size: Optional[int] = None
    emb_dim: int = 80  # the embedding width of every field
    # The widths of the deep MLP's hidden layers, each >= 1.
    deep_layers: List[int] = field(default_factory=lambda: [1024, 512, 256, 128])
    keep_prob: float = 1.0  # dropout keep probability of the deep layers, in (0, 1]
    init_range: float = 0.01  # uniform(-r, r) for the embedding tables, > 0
    l2_coef: float = 8e-5  # L2 on the deep embedding table, added to deep_loss (>= 0)
    wide_lr: float = 5e-2  # the wide part's learning rate (FTRL), > 0
    deep_lr: float = 3.5e-4  # the deep part's learning rate (Adam / LazyAdam), > 0
    loss_scale: float = 1024.0  # the sens both gradients are scaled by, > 0


# --- sections of config.yaml that are not groups ---------------------------------------


# trainer.device_target: "None" (or null) lets MindSpore pick.
DEVICE_TARGETS = ("None", "CPU", "GPU", "Ascend")


@dataclass
class TrainerConfig:
    epochs: int = 10  # epochs to train, >= 1
    seed: int = 1  # the global seed (mindspore.set_seed), 0 to 2**32 - 1
    mode: ContextMode = ContextMode.graph  # MindSpore's execution mode
    # "None" lets MindSpore pick the backend of the installed package (init_env).
    device_target: Optional[str] = "None"
    # The device to train on, when no launcher sets DEVICE_ID (distributed ranks get theirs).
    device_id: int = 0
    loss_print_interval: int = 20  # LossMonitor(per_print_times): a loss line every n steps
    progress_bar: ProgressBar = ProgressBar.auto  # a progress bar of the epoch's steps
    # Continue an interrupted run from its last good checkpoint (ms_exp/checkpoint/resume.py):
    # "auto" (the newest unfinished run of this config, else a new run), an MLflow run id, a run
    # directory or a checkpoint file. None: always a new run.
    resume: Optional[str] = None
    loop: TrainLoop = TrainLoop.model  # what runs the training steps
    # Sink mode (Model.train(dataset_sink_mode=True, sink_size=...)): the device pulls
    # sink_size steps per call and callbacks see one step end per sink. The CPU has no sink
    # mode: there ms_exp trains without it and says so (docs/design.md#cpu-no-sink-mode).
    dataset_sink_mode: bool = False
    sink_size: int = -1  # steps per sink; -1: the whole dataset
    # Callbacks added to both loops: name -> a ``_target_`` config of a
    # mindspore.train.Callback, its own arguments beside it. Each runs on every rank of a
    # distributed job unless its rank_zero_only is true. An experiment adds one by name and
    # removes one with `~trainer.callbacks.<name>` (or `<name>: null`).
    callbacks: Dict[str, Any] = field(default_factory=dict)
    # Eval metrics beside the classification ones: name -> a ``_target_`` config of a
    # mindspore.train.Metric (num_classes passed when its signature names it), logged as
    # eval/<name>.
    metrics: Dict[str, Any] = field(default_factory=dict)


@dataclass
class OptimizerConfig(Dict[str, Any]):
    """``name`` picks a built-in optimizer; ``_target_`` names any mindspore.nn.Optimizer
    subclass instead, every key not declared here being its own argument. Either way it gets
    the trainable parameters (or groups), ``learning_rate`` from the schedule below, and
    ``momentum``, ``weight_decay`` and the fixed loss scale when its signature names them
    (ms_exp/train/optimizer.py)."""

    # A built-in optimizer when _target_ is null; null beside a _target_, which is what is
    # built (ms_exp clears it there: config/targets.py without_unused_names).
    name: Optional[OptimizerName] = OptimizerName.momentum
    lr: float = 0.05  # the learning rate, > 0; with a schedule its peak (the model zoo's lr_max)
    momentum: float = 0.9  # in [0, 1); given to an optimizer whose signature names it, not sgd
    weight_decay: float = 0.0  # >= 0; given to an optimizer whose signature names it
    schedule: LrSchedule = LrSchedule.constant  # the learning rate per step, after the warmup
    warmup_epochs: int = 0  # epochs of linear warmup from lr_init to lr
    min_lr: float = 0.0  # where linear decay ends (the model zoo's lr_end)
    # Where warmup starts (the model zoo's lr_init); None: min_lr.
    lr_init: Optional[float] = None
    # Epochs the warmup and decay span (the model zoo's total_epochs); None: trainer.epochs.
    # More than trainer.epochs stops training partway down the schedule, as the
    # dimension-reduction tutorial trains 70 epochs of a 90-epoch schedule.
    decay_epochs: Optional[int] = None
    # The model zoo's init_group_params: no weight decay on batch norm (gamma, beta) and
    # biases, weight_decay on every other parameter.
    group_params: bool = False
    # Any mindspore.nn.Optimizer subclass, e.g. mindspore.nn.AdamWeightDecay; wins over name.
    _target_: Optional[str] = None


@dataclass
class CallbackEntry:
    """One of ``trainer.callbacks``: a mindspore.train.Callback by ``_target_``. Beside the
    keys below it takes the target's own arguments; the keys below are ms_exp's, never
    passed to the target."""

    # Build and run it on rank 0 only. False: on every rank, as MindSpore runs the
    # callbacks each rank's Model.fit is given, because a callback may have to act in each
    # rank (write that rank's own file, or join a collective operation that every rank must
    # call). A callback writing one file that all ranks share wants true.
    rank_zero_only: bool = False
    # Required: the Callback class, or a function declared to return one (`-> Callback`).
    _target_: Optional[str] = None


def callback_rank_zero_only(node: DictConfig) -> bool:
    """``rank_zero_only`` of a ``trainer.callbacks`` entry, typed by CallbackEntry (OmegaConf's
    ValidationError for a non-bool); read from ``node`` first so an interpolation resolves."""
    typed = OmegaConf.structured(CallbackEntry)
    typed.rank_zero_only = node.get("rank_zero_only", False)
    return bool(typed.rank_zero_only)


@dataclass
class LossPart(Dict[str, Any]):
    """One term of a loss made of several (the training-flow tutorial's loss1 + loss2): a
    named loss, or any loss Cell by ``_target_`` with its own arguments beside ``weight``."""

    name: Optional[LossName] = LossName.cross_entropy  # a built-in loss, as loss.name
    label_smoothing: float = 0.0  # as loss.label_smoothing
    weight: float = 1.0  # the part's weight in the sum, >= 0 (0: reported, not trained on)
    _target_: Optional[str] = None  # any loss Cell of (logits, labels); wins over name


@dataclass
class LossConfig(Dict[str, Any]):
    """``name`` picks a built-in loss; ``_target_`` names any loss Cell instead, every key
    not declared here being its own argument (``label_smoothing`` too when not 0), and
    ``num_classes`` passed when its signature names it (ms_exp/train/losses.py)."""

    # A built-in loss when _target_ is null; null beside a _target_, which is what is built
    # (ms_exp clears it there: config/targets.py without_unused_names).
    name: Optional[LossName] = LossName.cross_entropy
    label_smoothing: float = 0.0  # in [0, 1); 0 with softmax_cross_entropy, which has none
    # Several losses: part name -> LossPart (each read typed by loss_parts: OmegaConf cannot
    # type the values of a dict by a class subclassing Dict). The loss is the weighted sum of
    # the parts, and each part is logged as `train/<part name>`. Empty: the one loss above.
    parts: Dict[str, Any] = field(default_factory=dict)
    # Any loss Cell of (logits, labels), e.g. my_project.losses.Focal; wins over name.
    _target_: Optional[str] = None


# What each kind of ``_target_`` must build, as the one-line refusals name it.
LOSS_TARGET = "a mindspore.nn.Cell (a loss of logits and labels)"
OPTIMIZER_TARGET = "a subclass of mindspore.nn.Optimizer"
# What every optimizer is given (the trainable parameters or their groups, the schedule).
OPTIMIZER_REQUIRED = ("params", "learning_rate")
CALLBACK_TARGET = "a mindspore.train.Callback"
METRIC_TARGET = "a mindspore.train.Metric"


def own_keys(schema: type) -> Tuple[str, ...]:
    """The keys of a section that are ms_exp's, never its ``_target_``'s arguments."""
    return tuple(f.name for f in dataclasses.fields(schema) if f.name != "_target_")


def loss_own_keys(loss_cfg: DictConfig, schema: type) -> Tuple[str, ...]:
    """ms_exp's keys of ``loss`` or a part naming a ``_target_``: ``label_smoothing`` set
    (not 0) is the target's argument, as mindspore.nn.CrossEntropyLoss's."""
    return tuple(
        k
        for k in own_keys(schema)
        if not (k == "label_smoothing" and loss_cfg.get("label_smoothing"))
    )


def loss_part(part: Any) -> DictConfig:
    """One of ``loss.parts`` typed by LossPart (defaults filled in, values converted).
    Raises OmegaConf's ValidationError for a value of the wrong type."""
    return cast(DictConfig, OmegaConf.merge(OmegaConf.structured(LossPart), part))


def loss_parts(loss_cfg: DictConfig) -> Dict[str, DictConfig]:
    """``loss.parts`` typed, but the parts set to null."""
    return {
        str(name): loss_part(part)
        for name, part in (loss_cfg.parts or {}).items()
        if part is not None
    }


@dataclass
class AmpConfig:
    """Mixed precision and loss scaling, as stage one of the dimension-reduction tutorial
    configures ``Model(amp_level=..., keep_batchnorm_fp32=..., loss_scale_manager=...)``."""

    level: AmpLevel = AmpLevel.O0  # how much of the network computes in float16
    keep_batchnorm_fp32: Optional[bool] = None  # None: the level's default (True for O2)
    loss_scale: LossScaleKind = LossScaleKind.none  # the loss scale manager
    loss_scale_value: float = 1024.0  # the fixed scale, or the dynamic scale's start
    # fixed: skip the update of a step whose gradients overflow (inf/nan) instead of
    # applying it. dynamic always skips such steps, and lowers the scale.
    drop_overflow_update: bool = False
    scale_factor: int = 2  # dynamic, >= 2: divides the scale on overflow, multiplies it later
    scale_window: int = 2000  # dynamic, >= 1: good steps before the scale grows by scale_factor


@dataclass
class TrackingConfig:
    enabled: bool = True  # log the run to MLflow; false: train without a tracking store
    # None: `sqlite:///<working directory>/mlflow.db`, MLflow's own default store; or an
    # MLflow server with its host, such as `http://127.0.0.1:5000`.
    uri: Optional[str] = None
    # The MLflow experiment the runs belong to; at most 500 characters (MLflow's limit).
    experiment_name: str = "ms_exp"
    # None: `<model>-<dataset>-<parallel mode>`; at most 250 characters (MLflow's SQL stores).
    run_name: Optional[str] = None
    log_every_n_steps: int = 1  # log the step metrics (train/loss, ...) every n steps
    # The checkpoints the run logs as MLflow artifacts (with log_checkpoints=none, evaluating
    # the run later needs the local copy).
    log_checkpoints: CheckpointArtifacts = CheckpointArtifacts.last
    # Set by `--from-run`: the run this one reproduces (tagged ms_exp.rerun_of).
    rerun_of: Optional[str] = None
    # Do not train a job whose config already has a FINISHED run in the experiment.
    skip_finished: bool = False
    # Seconds between two samples of MLflow's system-metrics monitor (system/cpu_..., memory,
    # disk, network, GPU, and NPU through npu-smi), taken in the job's sidecar process, away
    # from the training step; null: no system metrics.
    system_metrics_interval: Optional[float] = 10.0
    # Log train/grad_norm, the global norm of the step's gradients, at every logged step.
    # Off by default: it made the default job's step 1.3-1.45x slower on CPU
    # (docs/benchmarks/grad_norm.md), far over the 2% a default may cost.
    log_grad_norm: bool = False
    # The best and the last checkpoint of the run as MLflow models (with a MindIR export).
    log_models: bool = True
    # Register the best model of the run (or of a sweep's jobs, by sweep.metric) under this
    # name in MLflow's Model Registry; null: register nothing.
    register_model: Optional[str] = None


@dataclass
class SweepConfig:
    """How a multirun (``-m``) runs its jobs; not part of any job's result."""

    # Launch no new job after the first one that failed; the sweep's parent run ends FAILED
    # naming it. false: every job runs, and the sweep fails at the end if one failed.
    fail_fast: bool = False
    # The final eval metric the job returns to the sweeper (Optuna optimises it and prunes
    # by it after every epoch), e.g. eval/loss; None: eval/accuracy, or eval/auc where the
    # model logs AUC (Wide&Deep).
    metric: Optional[str] = None


@dataclass
class Config:
    parallel: Any = MISSING
    checkpoint: Any = MISSING
    boost: Any = MISSING
    placement: Any = MISSING
    dataset: Any = MISSING
    model: Any = MISSING
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    amp: AmpConfig = field(default_factory=AmpConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    sweep: SweepConfig = field(default_factory=SweepConfig)


# group -> option -> schema. The YAML options in conf/ must match this table one to one
# (a test checks it), so an option cannot exist only in YAML or only here.
GROUP_SCHEMAS: Dict[str, Dict[str, type]] = {
    "parallel": {
        "stand_alone": StandAloneParallel,
        "data": DataParallel,
        "semi_auto": SemiAutoParallel,
        "auto": AutoParallel,
    },
    "checkpoint": dict.fromkeys(("integrated", "sliced", "none"), CheckpointSchema),
    "boost": {"off": BoostOff, "dim_reduce": BoostDimReduce},
    "placement": {"device": DevicePlacement, "host_device": HostDevicePlacement},
    "dataset": {
        "digits": DigitsDataset,
        "mnist": MnistDataset,
        "imagenet": ImageNetDataset,
        "synthetic": SyntheticDataset,
        "criteo": CriteoDataset,
    },
    "model": {"mlp": MlpModel, "resnet": ResNetModel, "wide_deep": WideDeepModel},
}


def register_schemas() -> None:
    """Store every schema in Hydra's ConfigStore and register the resolvers (idempotent)."""
    register_resolvers()
    store = ConfigStore.instance()
    if "ms_exp_schema.yaml" in store.repo:  # structuring every schema again: 0.12 s a call
        return
    store.store(name="ms_exp_schema", node=Config)
    for group, options in GROUP_SCHEMAS.items():
        for option, schema in options.items():
            store.store(group=f"schema/{group}", name=option, node=schema)


def builtin_target(group: str, option: str) -> str:
    """The ``_target_`` of a built-in option: its schema is the one place that names it."""
    return str(getattr(GROUP_SCHEMAS[group][option], TARGET))


def builtin_targets() -> frozenset:
    """The ``_target_`` of every built-in option: all its arguments are its schema's keys."""
    schemas = [schema for options in GROUP_SCHEMAS.values() for schema in options.values()]
    return frozenset(t for t in (getattr(schema, TARGET, None) for schema in schemas) if t)


def group_schema(group: str, node: DictConfig, choice: Optional[str]) -> Optional[type]:
    """The schema of a group's option: a built-in option's, or the built-in one whose
    ``_target_`` (or ``mode``) a user's option re-uses; None for a user's own target."""
    options = GROUP_SCHEMAS[group]
    target = target_path(node)
    if target is not None:
        return next(
            (schema for schema in options.values() if getattr(schema, TARGET, None) == target), None
        )
    if choice in options:
        return options[choice]
    return options.get(node.get("mode"))
