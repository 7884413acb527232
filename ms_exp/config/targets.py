"""Components named by ``_target_``, ms_exp's own included: imported, their arguments (a
section's keys but ms_exp's own, plus what ms_exp knows where the signature names it)
fitted to the signature, and built with Hydra's ``instantiate``, every failure one line
naming the key. Nothing here imports MindSpore; importing a target may."""

import inspect
import logging
import sys
import typing
from typing import Any, Callable, Dict, Iterable, Iterator, Mapping, Optional, Tuple

from omegaconf import DictConfig, ListConfig, OmegaConf, open_dict

from ms_exp.config.errors import ConfigError, InvalidConfig, show

TARGET = "_target_"
# Said after the keys a section declares, where other keys are a target's arguments.
TARGET_ARGUMENTS = f" (other keys only beside a {TARGET}: its own arguments)"


# Sections where ``name`` picks a built-in class and a ``_target_`` beside it names another.
NAMED_SECTIONS = ("optimizer", "loss")


def without_unused_names(cfg: DictConfig) -> DictConfig:
    """``cfg`` with ``name: null`` wherever a ``_target_`` beside it is what gets built, so
    that the config a job prints (``--cfg job``), saves and records as params names the loss
    and optimizer it uses, not a built-in one it does not."""
    sections = [cfg.get(key) for key in NAMED_SECTIONS]
    parts = OmegaConf.select(cfg, "loss.parts", default=None)
    sections += list(parts.values()) if isinstance(parts, DictConfig) else []
    for node in sections:
        if isinstance(node, DictConfig) and target_path(node) and node.get("name") is not None:
            with open_dict(node):
                node.name = None
    return cfg


def target_path(node: Any) -> Optional[str]:
    """The ``_target_`` of a config section (a DictConfig is a Mapping), or None."""
    return node.get(TARGET) if isinstance(node, Mapping) else None


def targets_in(node: Any, prefix: str = "") -> Iterator[Tuple[str, object]]:
    """``(key, target)`` of every ``_target_`` in ``node``, unresolved (an interpolation
    is the string it is: it does not match a trusted name)."""
    if isinstance(node, (DictConfig, ListConfig)):
        node = OmegaConf.to_container(node, resolve=False)
    if isinstance(node, dict):
        for name, value in node.items():
            key = f"{prefix}.{name}" if prefix else str(name)
            if name == TARGET:
                yield key, value
            else:
                yield from targets_in(value, key)
    elif isinstance(node, (list, tuple)):
        for index, value in enumerate(node):
            yield from targets_in(value, f"{prefix}[{index}]")


def load_target(key: str, path: Optional[str]) -> Callable:
    """Import ``module.attribute``; refuse in one line when it does not import."""
    from hydra.utils import get_object

    if not isinstance(path, str) or "." not in path:
        raise ConfigError(f"{key}.{TARGET}", path, "a dotted path: module.Class or module.function")
    # get_object logs the error on several lines before raising it: it is reported here,
    # on one.
    logger = logging.getLogger("hydra.utils")
    quiet, logger.disabled = logger.disabled, True
    try:
        target = get_object(path)
    except Exception as error:  # noqa: BLE001 - any failure to import is the user's to see
        lines = str(error).strip().splitlines() or [type(error).__name__]
        raise ConfigError(
            f"{key}.{TARGET}",
            path,
            "an importable class or function (run from the project "
            "folder, or put it on PYTHONPATH)",
            problem=f"does not import ({lines[-1]})",
        ) from error
    finally:
        logger.disabled = quiet
    if not callable(target):
        raise ConfigError(
            f"{key}.{TARGET}", path, "a class or function", problem=f"is a {type(target).__name__}"
        )
    return target


def parameters(target: Callable) -> Optional[Dict[str, Optional[inspect.Parameter]]]:
    """The keyword parameters of ``target`` (a class: of its constructor), with ``"**"``
    (None) among them when it also takes ``**kwargs``; None when they cannot be known
    before calling it (``*args, **kwargs`` all the way down)."""
    try:
        signature = inspect.signature(target)
    except (TypeError, ValueError):
        return None
    if _only_varargs(signature) and inspect.isclass(target):
        # MindSpore's optimizers register their arguments with a decorator that does not
        # keep the signature (no functools.wraps), some under a second one (``deprecated``,
        # FTRL's): read the constructor they wrap.
        wrapped = _wrapped_init(target.__init__)
        if wrapped is None:
            return None
        inner = inspect.signature(wrapped)
        signature = inner.replace(parameters=list(inner.parameters.values())[1:])
    found: Dict[str, Optional[inspect.Parameter]] = {
        name: p
        for name, p in signature.parameters.items()
        if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    }
    if any(p.kind == p.VAR_KEYWORD for p in signature.parameters.values()):
        return None if not found else {**found, "**": None}
    return found


def _wrapped_init(function: Any, depth: int = 3) -> Optional[Callable]:
    """The ``__init__`` a chain of decorators closes over, if one does."""
    for cell in getattr(function, "__closure__", None) or ():
        try:
            wrapped = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        if not inspect.isfunction(wrapped):
            continue
        if wrapped.__name__ == "__init__" and not _only_varargs(inspect.signature(wrapped)):
            return wrapped
        if depth > 1:
            found = _wrapped_init(wrapped, depth - 1)
            if found is not None:
                return found
    return None


def _only_varargs(signature: inspect.Signature) -> bool:
    kinds = {p.kind for p in signature.parameters.values()}
    varargs = {inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD}
    return bool(kinds) and kinds <= varargs


def config_arguments(node: Any, own_keys: Iterable[str] = ()) -> Dict[str, Any]:
    """The target's keyword arguments: every key of ``node`` but ``_target_`` and ms_exp's
    own keys, resolved to plain values (nested ``_target_`` configs stay configs)."""
    own = set(own_keys) | {TARGET}
    values = (
        typing.cast(Dict[str, Any], OmegaConf.to_container(node, resolve=True))
        if isinstance(node, DictConfig)
        else dict(node)
    )
    return {k: v for k, v in values.items() if k not in own}


def fit_arguments(
    key: str,
    path: str,
    target: Callable,
    arguments: Mapping[str, Any],
    provided: Optional[Mapping[str, Any]] = None,
    required: Iterable[str] = (),
) -> Dict[str, Any]:
    """``arguments`` (from the config) plus what ms_exp ``provides`` that the signature names
    and the config leaves unset (None counts as unset), checked against the signature:
    an unknown or missing argument is refused in one line. ``required``: what ms_exp
    always passes (the target must accept it)."""
    provided = dict(provided or {})
    params = parameters(target)
    kwargs = dict(arguments)
    if params is None:  # cannot be checked before building: pass what is set
        kwargs.update({k: v for k, v in provided.items() if k in required})
        return kwargs
    open_ended = params.pop("**", False) is None
    accepts = ", ".join(params) or "none"
    for name in required:
        if name not in params and not open_ended:
            raise ConfigError(
                f"{key}.{TARGET}",
                path,
                f"a callable taking {name!r} (its parameters: {accepts})",
                problem=f"does not take {name!r}, which ms_exp passes",
            )
    for name, value in arguments.items():
        if name not in params and not open_ended:
            raise ConfigError(
                f"{key}.{name}",
                value,
                f"a parameter of {path}: {accepts}",
                problem="is not an argument of the target",
            )
    for name, value in provided.items():
        if (name in params or name in required) and kwargs.get(name) is None:
            kwargs[name] = value
    for name, param in params.items():  # "**" popped above: every one a Parameter
        if param is not None and param.default is param.empty and name not in kwargs:
            raise ConfigError(
                f"{key}.{name}",
                "missing",
                f"a value: {path} requires {name!r} (its parameters: {accepts})",
            )
    return kwargs


def check_kind(
    key: str,
    path: str,
    target: Callable,
    expected: Tuple[type, ...] = (),
    expected_text: str = "",
    factories: bool = False,
) -> None:
    """Refuse, before it is called, a target that cannot give what its key builds: one of
    the standard library, a class that is not one of ``expected``, a function declared to
    return something else, and (unless ``factories``: networks and datasets are often made
    by functions) a function that does not declare what it returns."""
    key = f"{key}.{TARGET}"
    wanted = expected_text or " or ".join(t.__name__ for t in expected)
    refuse_standard_library(key, path, getattr(target, "__module__", None), wanted)
    if not expected:
        return
    if inspect.isclass(target):
        if not issubclass(target, expected):
            raise ConfigError(key, path, wanted, problem=f"is the class {target.__name__}")
        return
    try:
        returns = inspect.signature(target, eval_str=True).return_annotation
    except (TypeError, ValueError, NameError, SyntaxError):  # unreadable: as undeclared
        returns = None
    if returns is not None and returns is not inspect.Signature.empty:
        if not (inspect.isclass(returns) and issubclass(returns, expected)):
            shown = getattr(returns, "__name__", str(returns))
            raise ConfigError(key, path, wanted, problem=f"is declared to return {shown}")
        return
    if not factories:
        names = " or ".join(t.__name__ for t in expected)
        raise ConfigError(
            key,
            path,
            f"{wanted} (a class, or a function declared `-> {names}`)",
            problem="is a function that does not declare what it returns",
        )


def refuse_standard_library(
    key: str, path: str, module: Optional[str] = None, wanted: str = ""
) -> None:
    """A target of Python's standard library (``builtins.open``, ``shutil.rmtree``) is no
    component: refused by ``key``, whatever re-exports it."""
    packages = {path.split(".")[0], (module or path).split(".")[0]}
    if packages & sys.stdlib_module_names:  # the top-level names of the standard library
        raise ConfigError(
            key,
            path,
            wanted or "a class or function of your project or of a library of components",
            problem="is part of Python's standard library, not a component",
        )


def build(
    key: str,
    node: Any,
    own_keys: Iterable[str] = (),
    provided: Optional[Mapping[str, Any]] = None,
    required: Iterable[str] = (),
    expected: Tuple[type, ...] = (),
    expected_text: str = "",
    factories: bool = False,
) -> Any:
    """Build the component ``node`` names (``fit_arguments``) with Hydra's ``instantiate``;
    check before calling it that it can be one of ``expected`` (``check_kind``), and after."""
    from hydra.utils import instantiate

    path = target_path(node)
    target = load_target(key, path)
    assert path is not None  # load_target refused a section without a target
    check_kind(key, path, target, expected, expected_text, factories)
    arguments = config_arguments(node, own_keys)
    for nested_key, nested in targets_in(arguments, key):
        if isinstance(nested, str):  # instantiate builds these too, before the target
            refuse_standard_library(nested_key, nested)
    kwargs = fit_arguments(key, path, target, arguments, provided, required)
    config_keys = {k: v for k, v in kwargs.items() if _plain(v)}
    objects = {k: v for k, v in kwargs.items() if k not in config_keys}
    try:
        # The objects (parameters, a Placement) are passed to the partial untouched:
        # instantiate would turn a dataclass instance into a dict.
        factory = instantiate({TARGET: path, "_partial_": True, **config_keys}, _convert_="all")
        built = factory(**objects)
    except Exception as error:  # noqa: BLE001 - the component's own error, in one line
        cause = error.__cause__ or error
        if isinstance(cause, InvalidConfig):  # the component checked its own config
            raise cause from None
        text = " ".join(str(cause).split()) or type(cause).__name__
        # The user's own keys first: the error is most often one of their values.
        given = ", ".join(
            f"{key}.{name}={show(value)}"
            for name, value in arguments.items()
            if name in config_keys
        )[:300]
        raise ConfigError(
            f"{key}.{TARGET}",
            path,
            f"values of {'these keys' if given else 'arguments'} that {path} accepts",
            problem=f"failed to build{f' with {given}' if given else ''}: "
            f"{type(cause).__name__}: {text[:300]}",
        ) from error
    if expected and not isinstance(built, expected):
        raise ConfigError(
            f"{key}.{TARGET}",
            path,
            expected_text or " or ".join(t.__name__ for t in expected),
            problem=f"returned a {type(built).__name__}",
        )
    return built


def _plain(value: Any) -> bool:
    """Values a config can hold; anything else (parameters, cells, a Placement) is passed
    to the target as it is."""
    if value is None or isinstance(value, (str, int, float, bool)):
        return True
    if isinstance(value, (list, tuple)):
        return all(_plain(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    return False


def component_name(node: Any) -> str:
    """What labels a component in run names and tags: its ``name`` key, else the last part
    of its ``_target_`` (``my_project.nets.TinyNet`` -> ``TinyNet``)."""
    name = node.get("name") if hasattr(node, "get") else None
    if name:
        return str(name)
    path = target_path(node)
    return path.rsplit(".", 1)[-1] if path else "unnamed"
