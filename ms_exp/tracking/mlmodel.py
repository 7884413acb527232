"""The MLmodel file of a model directory: written on the MLflow side of a job, read back.

The job saves the example arrays (:func:`save_example`); the tracker writes ``MLmodel``
from them in the sidecar, where MLflow is imported already
(docs/design.md#mlmodel-in-the-sidecar). ``spec`` describes the flavors as JSON:
``{"flavor": name, "fields": {...}, "loader_module": ...}``.
"""

from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, Mapping, Sequence

if TYPE_CHECKING:
    import numpy as np

EXAMPLE_ARRAYS = "example.npz"
_OUTPUT = "output"


def save_example(directory: Path, inputs: Sequence["np.ndarray"], output: "np.ndarray") -> None:
    """Keep the input example and the network's output on it for :func:`write_mlmodel`."""
    import numpy as np

    arrays = {f"input_{i}": array for i, array in enumerate(inputs)}
    np.savez(Path(directory) / EXAMPLE_ARRAYS, **arrays, **{_OUTPUT: output})


def write_mlmodel(directory: Path, spec: Mapping[str, Any]) -> None:
    """``directory/MLmodel``: the flavor ``spec`` names with its fields, ``python_function``
    with ``spec``'s loader module, the signature (inputs to output) and the input example;
    ``example.npz`` is removed once they are written."""
    import mlflow.pyfunc
    import numpy as np
    from mlflow.models import Model, infer_signature
    from mlflow.models.utils import _save_example

    directory = Path(directory)
    if (directory / "MLmodel").is_file() and not (directory / EXAMPLE_ARRAYS).exists():
        return  # written already: a journal's upload cut short after it goes on
    with np.load(directory / EXAMPLE_ARRAYS, allow_pickle=False) as saved:
        inputs = [saved[f"input_{i}"] for i in range(len(saved.files) - 1)]
        output = saved[_OUTPUT]
    # One array for a one-input network; named arrays (input_0, ...) otherwise.
    example = (
        inputs[0] if len(inputs) == 1 else {f"input_{i}": array for i, array in enumerate(inputs)}
    )
    model = Model(signature=infer_signature(example, output))
    model.add_flavor(str(spec["flavor"]), **dict(spec["fields"]))
    mlflow.pyfunc.add_to_model(model, loader_module=str(spec["loader_module"]))
    _save_example(model, example, str(directory))
    model.save(str(directory / "MLmodel"))
    (directory / EXAMPLE_ARRAYS).unlink()


def flavor_of(directory: Path, flavor: str) -> Dict[str, Any]:
    """The fields of ``flavor`` in the MLmodel file of ``directory``."""
    from mlflow.models import Model

    flavors = Model.load(str(Path(directory) / "MLmodel")).flavors
    if flavor not in flavors:
        raise ValueError(f"{directory}: not an ms_exp model (no {flavor} flavor in MLmodel)")
    return flavors[flavor]
