"""ms_exp's config files say only what the schemas do not
(docs/developing.md#adding-a-built-in-option).

Every default lives in its schema (ms_exp/config/schema.py), the one place the reference page
is written from: conf/config.yaml holds the defaults list and Hydra's settings, and an option's
YAML holds its schema in its defaults list and only the values that differ from the schema's.
A key the schema lacks, or a value equal to its default, is a second place that can drift.
"""

from pathlib import Path
from typing import Iterator, Tuple

import pytest
import yaml
from omegaconf import DictConfig, OmegaConf

from ms_exp.config.schema import GROUP_SCHEMAS, Config
from ms_exp.preflight.compose import conf_dir

pytestmark = pytest.mark.unit


def restated(values: dict, schema: DictConfig, prefix: str = "") -> Iterator[Tuple[str, str]]:
    """``(key, why)`` of each key of ``values`` that is not the schema's to set or that
    repeats its default."""
    for name, value in values.items():
        key = f"{prefix}{name}"
        if name not in schema:
            if not _open_dict(schema):
                yield key, "is not a key of its schema"
            continue
        default = schema._get_node(name)
        if isinstance(value, dict) and isinstance(default, DictConfig):
            yield from restated(value, default, key + ".")
            continue
        plain = (
            OmegaConf.to_container(default) if OmegaConf.is_config(default) else default._value()
        )
        plain = getattr(plain, "value", plain)  # an enum's value
        if value == plain or str(value) == str(plain):
            yield key, f"repeats its schema's default {plain!r}"


def _open_dict(node: DictConfig) -> bool:
    """A ``Dict[str, ...]`` field (strategies, callbacks): its entries are the user's."""
    return node._metadata.object_type in (None, dict)


def option_files():
    for group, options in GROUP_SCHEMAS.items():
        for path in sorted((conf_dir() / group).glob("*.yaml")):
            yield pytest.param(group, path, id=f"{group}/{path.stem}")


@pytest.mark.parametrize("group, path", list(option_files()))
def test_an_options_yaml_holds_only_what_its_schema_does_not(group, path: Path):
    values = yaml.safe_load(path.read_text()) or {}
    assert values.get("defaults", [None])[0] == f"/schema/{group}/{path.stem}@_here_"
    schema = OmegaConf.structured(GROUP_SCHEMAS[group][path.stem])
    values = {k: v for k, v in values.items() if k != "defaults"}
    assert list(restated(values, schema)) == []


def test_the_primary_config_holds_the_defaults_list_and_hydras_settings():
    values = yaml.safe_load((conf_dir() / "config.yaml").read_text())
    assert set(values) == {"defaults", "hydra"}
    assert values["defaults"][0] == "ms_exp_schema"
    assert {next(iter(e)) for e in values["defaults"][1:] if isinstance(e, dict)} >= set(
        GROUP_SCHEMAS
    )


def test_the_check_finds_a_repeated_default_and_a_key_the_schema_lacks():
    # The checks above must be able to fail.
    schema = OmegaConf.structured(GROUP_SCHEMAS["model"]["mlp"])
    assert list(restated({"hidden_size": 512, "hiden": 8, "weight_init": "zeros"}, schema)) == [
        ("hidden_size", "repeats its schema's default 512"),
        ("hiden", "is not a key of its schema"),
    ]
    root = OmegaConf.structured(Config)
    assert list(restated({"trainer": {"epochs": 10, "callbacks": {"x": {}}}}, root)) == [
        ("trainer.epochs", "repeats its schema's default 10")
    ]
