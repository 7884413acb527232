"""Write ``docs/reference/config.md``: every config key of ms_exp with its type, default,
allowed values and meaning, generated from the schemas and the YAML options so it cannot
drift from them.

    python tools/config_reference.py           # rewrite the page
    python tools/config_reference.py --check   # exit 1 when the page differs from the sources

Where each column comes from:

- keys, types and closed choices: the dataclasses and Enums of ``ms_exp/config/schema.py``
  (registered in Hydra's ConfigStore), plus the few string or integer choices that
  ``ms_exp/preflight`` checks against a tuple (``CLOSED_SETS`` below, imported from there);
- defaults: the config as ``python -m ms_exp.run`` composes it, every option of every group
  in ``conf/`` composed once (interpolations such as ``${oc.env:DATA_PATH,null}`` shown as
  written);
- meaning: the comment beside a field (trailing its line) or the comment block right above
  it in ``schema.py``, and the trailing comment of an Enum member; a section's or a
  nested key's intro is its class docstring. A field without a comment fails
  ``tests/test_config_reference.py``, which names the line to add it to;
- each option's description: the comment block at the top of its YAML file.

Deterministic (no timestamps, the schemas' and files' own order) and quick: MindSpore is
never imported, and Hydra composes a handful of configs that together select every option.
"""

import argparse
import ast
import dataclasses
import io
import re
import sys
import tokenize
import typing
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import yaml
from hydra import compose
from omegaconf import OmegaConf

from ms_exp.boost.checks import LEVELS as BOOST_LEVELS
from ms_exp.config import schema
from ms_exp.config.schema import (
    GROUP_SCHEMAS,
    CallbackEntry,
    Config,
    LossConfig,
    LossPart,
    TrainerConfig,
)
from ms_exp.models.checks import MLP_WEIGHT_INITS, RESNET_DEPTHS
from ms_exp.preflight.compose import CONF_DIR, ConfigSource, hydra_for

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "reference" / "config.md"
COMMAND = "python tools/config_reference.py"
SCHEMA_FILE = Path(schema.__file__).resolve()
SCHEMA_SHOWN = "ms_exp/config/schema.py"

# Values a type cannot close but ms_exp/preflight checks against a tuple: (schema, field).
CLOSED_SETS: Dict[Tuple[type, str], Sequence] = {
    (schema.TrainerConfig, "device_target"): schema.DEVICE_TARGETS,
    (schema.BoostDimReduce, "level"): BOOST_LEVELS,
    (schema.MlpModel, "weight_init"): MLP_WEIGHT_INITS,
    (schema.ResNetModel, "depth"): RESNET_DEPTHS,
}
# Dict-valued keys whose every value is read typed by a schema of its own.
TYPED_VALUES: Dict[Tuple[type, str], type] = {
    (LossConfig, "parts"): LossPart,
    (TrainerConfig, "callbacks"): CallbackEntry,
}
# Hydra plugins that the launcher presets in conf/hydra/launcher extend.
PLUGIN_DOCS = {
    "joblib": "https://hydra.cc/docs/plugins/joblib_launcher/",
    "submitit_slurm": "https://hydra.cc/docs/plugins/submitit_launcher/",
    "submitit_local": "https://hydra.cc/docs/plugins/submitit_launcher/",
}


# --- comments of schema.py -------------------------------------------------------------


@dataclass(frozen=True)
class Comment:
    text: str  # '' when the member has none
    line: int  # where the member is declared in schema.py
    owner: str = ""  # the class declaring it


def _clean(comment: str) -> str:
    return comment.lstrip("#").strip()


def read_comments(path: Path = SCHEMA_FILE) -> Dict[str, Dict[str, Comment]]:
    """Class name -> field or member name -> its comment: the comment trailing its line,
    after the comment block right above it (no blank line between)."""
    source = path.read_text()
    lines = source.splitlines()
    comments: Dict[int, Tuple[int, str]] = {}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            comments[token.start[0]] = (token.start[1], token.string)

    def own_line(number: int) -> bool:
        return number in comments and not lines[number - 1][: comments[number][0]].strip()

    def above(number: int) -> List[str]:
        block = []
        while own_line(number - 1):
            number -= 1
            block.insert(0, _clean(comments[number][1]))
        return block

    def trailing(node: ast.stmt) -> List[str]:
        for number in range(node.end_lineno, node.lineno - 1, -1):
            if number in comments and not own_line(number):
                return [_clean(comments[number][1])]
        return []

    found: Dict[str, Dict[str, Comment]] = {}
    for node in ast.parse(source).body:
        if not isinstance(node, ast.ClassDef):
            continue
        members = found.setdefault(node.name, {})
        for statement in node.body:
            if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
                name = statement.target.id
            elif (
                isinstance(statement, ast.Assign)
                and len(statement.targets) == 1
                and isinstance(statement.targets[0], ast.Name)
            ):
                name = statement.targets[0].id
            else:
                continue
            text = " ".join(above(statement.lineno) + trailing(statement))
            members[name] = Comment(text, statement.lineno, node.name)
    return found


COMMENTS = read_comments()


def field_comment(cls: type, name: str) -> Comment:
    """A field's comment, from the nearest class of ``cls``'s MRO that comments it; else
    an empty comment at the line of the nearest class that declares it."""
    declared = None
    for klass in cls.__mro__:
        comment = COMMENTS.get(klass.__name__, {}).get(name)
        if comment is None:
            continue
        if comment.text:
            return comment
        declared = declared or comment
    return declared or Comment("", 0, cls.__name__)


def member_comment(enum: type, member: Enum) -> str:
    comment = COMMENTS.get(enum.__name__, {}).get(member.name)
    return comment.text if comment else ""


def class_intro(cls: type) -> str:
    """The first paragraph of a schema class's own docstring ('' for none)."""
    doc = cls.__dict__.get("__doc__") or ""
    if not doc or doc.startswith(f"{cls.__name__}("):  # dataclass's generated signature
        return ""
    return " ".join(doc.strip().split("\n\n")[0].split())


def missing_meanings() -> List[str]:
    """One line per config key of the schemas without a meaning, naming where to add it (a
    nested section may have its class docstring instead)."""
    missing = []
    for prefix, cls in _documented_schemas():
        for key, owner, item in _fields(cls, prefix):
            comment = field_comment(owner, item.name)
            nested = dataclasses.is_dataclass(item.type) and class_intro(item.type)
            if not (comment.text or nested):
                missing.append(
                    f"{key} has no meaning: add a comment beside or above "
                    f"{comment.owner}.{item.name} ({SCHEMA_SHOWN}:{comment.line})"
                )
    return sorted(set(missing))


def _documented_schemas() -> Iterator[Tuple[str, type]]:
    for name, section in _sections():
        yield f"{name}.", section
    for (cls, name), typed in TYPED_VALUES.items():
        yield f"{_section_of(cls)}.{name}.<name>.", typed
    for group, options in GROUP_SCHEMAS.items():
        for option_schema in dict.fromkeys(options.values()):
            yield f"{group}.", option_schema


def _fields(cls: type, prefix: str) -> Iterator[Tuple[str, type, dataclasses.Field]]:
    """Every key of a schema, nested sections' keys included, with the class holding it."""
    for item in dataclasses.fields(cls):
        yield f"{prefix}{item.name}", cls, item
        if dataclasses.is_dataclass(item.type):
            yield from _fields(item.type, f"{prefix}{item.name}.")


def _sections() -> List[Tuple[str, type]]:
    """Config's sections that are not groups, in its order."""
    return [
        (item.name, item.type)
        for item in dataclasses.fields(Config)
        if dataclasses.is_dataclass(item.type)
    ]


def _section_of(cls: type) -> str:
    return next(name for name, section in _sections() if section is cls)


# --- Markdown --------------------------------------------------------------------------

CODE_SPAN = re.compile(r"``?([^`]+?)``?")
# Python's None, True and False in a comment are the config's null, true and false; a quoted
# "None" is a value of its own.
PYTHON_CONSTANTS = re.compile(r"(?<![\"'\w])(None|True|False)(?![\"'\w])")
YAML_CONSTANTS = {"None": "null", "True": "true", "False": "false"}
# Names in prose shown as code: keys, paths, modules and calls (``trainer.epochs``,
# ``ms_exp/train/optimizer.py``, ``Model(boost_level=...)``), told from words by the ``_``,
# ``.``, ``/``, ``=`` or call parentheses in them.
_WORD = r"(?:[A-Za-z_]|<\w+>)(?:[\w*+-]|<\w+>)*"
IDENTIFIER = re.compile(
    rf"(?<![\w`/.<>*+=~-]){_WORD}(?:[./=](?:{_WORD}|\.\.\.))*"
    r"(?:\([^()\n]{0,60}\))?"
)
NOT_CODE = {"e.g", "i.e"}


def text(value: str, sentence: bool = False) -> str:
    """Prose for Markdown (a table cell too): code spans kept (``double`` ones made single),
    names shown as code, and the characters Markdown or a table would take escaped.
    ``sentence``: a meaning, made to start with a capital and end with a full stop."""
    value = " ".join(value.split())
    if sentence and value:
        value = _sentence(value)
    out, last = [], 0
    for span in CODE_SPAN.finditer(value):
        out.append(_prose(value[last : span.start()]))
        out.append(code(span.group(1)))
        last = span.end()
    out.append(_prose(value[last:]))
    return "".join(out)


def _sentence(value: str) -> str:
    first = value.split(" ", 1)[0].rstrip(",;")
    if first.isalpha() and first.islower():
        value = value[0].upper() + value[1:]
    return value if value.endswith(".") else value + "."


# A comment's citation of the design page becomes a link to its section.
DESIGN_LINK = re.compile(r"docs/design\.md#([\w-]+)")


def _prose(value: str) -> str:
    out, last = [], 0
    for link in DESIGN_LINK.finditer(value):
        out.append(_names(value[last : link.start()]))
        out.append(f"[design](../design.md#{link.group(1)})")
        last = link.end()
    out.append(_names(value[last:]))
    return "".join(out)


def _names(value: str) -> str:
    out, last = [], 0
    for name in IDENTIFIER.finditer(value):
        token = name.group(0)
        if token in NOT_CODE or not re.search(r"[_./=(]", token):
            continue
        out.append(_escape(value[last : name.start()]))
        out.append(code(token))
        last = name.end()
    out.append(_escape(value[last:]))
    return "".join(out)


def _escape(value: str) -> str:
    value = PYTHON_CONSTANTS.sub(lambda m: YAML_CONSTANTS[m.group(1)], value)
    value = value.replace("\\", "\\\\").replace("*", "\\*").replace("|", "\\|")
    value = value.replace("<", "&lt;").replace(">", "&gt;")
    return re.sub(r"(?<!\w)_|_(?!\w)", r"\\_", value)


def code(value: str) -> str:
    if "|" in value or "`" in value:  # a code span cannot hold either inside a table
        escaped = value.replace("&", "&amp;").replace("<", "&lt;").replace("|", "&#124;")
        return f"<code>{escaped.replace('`', '&#96;')}</code>"
    return f"`{value}`"


def yaml_value(value: Any) -> str:
    """A value as one writes it in YAML or on the command line."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Enum):
        return str(value.value)
    if isinstance(value, str):
        if value == "" or yaml.safe_load(value) != value:
            return repr(value)
        return value
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(yaml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {yaml_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, float):
        shown = f"{value:.12g}"  # 57.12, not 57.120000000000005 (0.224 * 255)
        return shown if re.search(r"[.en]", shown) else shown + ".0"
    return repr(value)


def type_name(kind: Any) -> str:
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin is typing.Union:
        inner = [arg for arg in args if arg is not type(None)]
        return f"{type_name(inner[0])} or null"
    if origin is list:
        return f"list of {type_name(args[0])}"
    if origin is dict:
        return "dict"
    if kind is Any:
        return "any"
    if isinstance(kind, type) and issubclass(kind, Enum):
        return "enum"
    if dataclasses.is_dataclass(kind):
        return "section"
    return kind.__name__


def _plain(kind: Any) -> Any:
    """``Optional[X]`` -> X."""
    if typing.get_origin(kind) is typing.Union:
        return next(arg for arg in typing.get_args(kind) if arg is not type(None))
    return kind


def allowed(cls: type, item: dataclasses.Field) -> str:
    kind = _plain(item.type)
    if isinstance(kind, type) and issubclass(kind, Enum):
        choices = []
        for member in kind:
            comment = member_comment(kind, member)
            choices.append(
                code(member.value) + (f": {text(comment, sentence=True)}" if comment else "")
            )
        return "<br>".join(choices)
    closed = CLOSED_SETS.get((cls, item.name))
    if closed is not None:
        return ", ".join(code(yaml_value(value)) for value in closed)
    return ""


HEADER = "| key | type | default | allowed | meaning |\n|---|---|---|---|---|"


def table(cls: type, values: Optional[dict], prefix: str = "") -> List[str]:
    """One row per key of ``cls`` (nested sections flattened to dotted keys), with the
    default from ``values`` (the composed node); ``values`` None: the schema's defaults."""
    if values is None:
        values = OmegaConf.to_container(OmegaConf.structured(cls), resolve=False)
    rows, nested = [], []
    for item in dataclasses.fields(cls):
        key = f"{prefix}{item.name}"
        meaning = field_comment(cls, item.name).text
        if dataclasses.is_dataclass(item.type):  # after the section's own keys
            meaning = meaning or class_intro(item.type)
            nested.append(f"| {code(key)} | section | | | {text(meaning, sentence=True)} |")
            nested.extend(table(item.type, values[item.name], f"{key}."))
            continue
        typed = TYPED_VALUES.get((cls, item.name))
        if typed is not None:
            meaning = _sentence(meaning) + f" Each one's keys: `{key}.<name>` below."
        default = code(yaml_value(values[item.name]))
        rows.append(
            f"| {code(key)} | {type_name(item.type)} | {default} | "
            f"{allowed(cls, item)} | {text(meaning, sentence=True)} |"
        )
    return rows + nested


# --- composing every option ------------------------------------------------------------


def option_header(path: Path) -> List[Tuple[str, str]]:
    """The comment block at the top of a YAML option as (kind, text) blocks in order:
    ``text`` for prose, ``code`` for the lines indented under it (commands)."""
    blocks: List[Tuple[str, str]] = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        body = line[1:]
        if body.strip().startswith("@package"):
            continue
        kind = "code" if body.startswith("   ") else "text"
        content = body.strip() if kind == "text" else body[3:].rstrip()
        if blocks and blocks[-1][0] == kind:
            joiner = " " if kind == "text" else "\n"
            blocks[-1] = (kind, blocks[-1][1] + joiner + content)
        else:
            blocks.append((kind, content))
    return blocks


def launcher_presets() -> List[str]:
    return sorted(p.stem for p in (CONF_DIR / "hydra" / "launcher").glob("*.yaml"))


def composed() -> Tuple[dict, Dict[str, Dict[str, dict]], Dict[str, dict]]:
    """The default config's sections, every group option's node and every launcher
    preset's node, as composed by Hydra the way ``python -m ms_exp.run`` composes them.
    Each compose selects one option of every group, so a handful cover them all."""
    groups = {group: list(options) for group, options in GROUP_SCHEMAS.items()}
    launchers = launcher_presets()
    rounds = max([len(options) for options in groups.values()] + [len(launchers)])
    options: Dict[str, Dict[str, dict]] = {group: {} for group in groups}
    presets: Dict[str, dict] = {}
    with hydra_for(ConfigSource()):
        default = compose("config", overrides=[])
        sections = {
            name: OmegaConf.to_container(default[name], resolve=False) for name, _ in _sections()
        }
        for number in range(rounds):
            picked = {group: names[min(number, len(names) - 1)] for group, names in groups.items()}
            overrides = [f"{group}={name}" for group, name in picked.items()]
            launcher = launchers[number] if number < len(launchers) else None
            if launcher:
                overrides.append(f"hydra/launcher={launcher}")
            cfg = compose("config", overrides=overrides, return_hydra_config=bool(launcher))
            for group, name in picked.items():
                options[group][name] = OmegaConf.to_container(cfg[group], resolve=False)
            if launcher:
                presets[launcher] = OmegaConf.to_container(cfg.hydra.launcher, resolve=False)
    return sections, options, presets


# --- the page --------------------------------------------------------------------------


def _blocks(blocks: List[Tuple[str, str]]) -> List[str]:
    out = []
    for kind, content in blocks:
        if kind == "code":
            out += ["```bash", content, "```", ""]
        else:
            out += [text(content), ""]
    return out


def _default_option(group: str) -> str:
    defaults = yaml.safe_load((CONF_DIR / "config.yaml").read_text())["defaults"]
    return next(
        str(entry[group]) for entry in defaults if isinstance(entry, dict) and group in entry
    )


def render() -> str:
    sections, options, presets = composed()
    out = [
        "# Config reference",
        "",
        f"<!-- Generated by {COMMAND}: do not edit by hand. -->",
        "",
        f"Generated from `{SCHEMA_SHOWN}` and the YAML options in `conf/` by "
        f"`{COMMAND}`; do not edit it by hand. After changing a schema, one of its comments "
        "or an option, run that command again (`tests/test_config_reference.py` fails until "
        "this page matches).",
        "",
        "Every key is set on the command line as `section.key=value` (`trainer.epochs=3`, "
        "`parallel.launcher.master_port=8200`) or in an experiment preset; a group option is "
        "picked as `group=option` (`dataset=mnist`). `python -m ms_exp.run --help` lists the "
        "groups and their options, and `--cfg job` added to a command line prints the "
        "config it composes. A key no schema declares, a value of the wrong type, "
        "a choice not listed under *allowed* and a value out of the range its *meaning* "
        "gives are refused in one line naming the key, before MindSpore starts and before any "
        "run directory or MLflow run exists.",
        "",
        "`null` is YAML's null (`None` in Python); a type ending in *or null* accepts it.",
        "",
        "## Sections",
        "",
        "The sections of the root schema (`Config` in ms_exp/config/schema.py) that are "
        "not groups.",
        "",
    ]
    for name, section in _sections():
        out += [f"### {name}", ""]
        intro = class_intro(section)
        if intro:
            out += [text(intro), ""]
        if issubclass(section, dict):
            out += [
                f"Besides the keys below, `{name}` takes the own arguments of the class its "
                f"`_target_` names: with `{name}._target_` set, a key this table does not list "
                f"is passed to that class as an argument (on the command line "
                f"`+{name}.<argument>=<value>`), checked against its signature before the run "
                "starts.",
                "",
            ]
        out += [HEADER, *table(section, sections[name], f"{name}."), ""]
        for (owner, key), typed in TYPED_VALUES.items():
            if owner is section:
                out += [f"#### {text(f'{name}.{key}.<name>')}", "", text(class_intro(typed)), ""]
                if issubclass(typed, dict):
                    out += [
                        "A part with a `_target_` takes that class's own arguments beside "
                        "the keys below.",
                        "",
                    ]
                out += [HEADER, *table(typed, None, f"{name}.{key}.<name>."), ""]
    out += [
        "## Config groups",
        "",
        "Each group picks one YAML option from `conf/<group>/`; the option starts from its "
        "schema and sets the defaults shown in its table. A project's own option (its own "
        "`_target_`, in a folder given with `--config-dir`) takes the target's arguments "
        "instead: see [Your own experiments](../guides/own-experiments.md).",
        "",
        "| group | options (default first) |",
        "|---|---|",
    ]
    defaults = {group: _default_option(group) for group in GROUP_SCHEMAS}
    for group, names in GROUP_SCHEMAS.items():
        ordered = [defaults[group]] + [n for n in names if n != defaults[group]]
        links = ", ".join(f"[{code(n)}](#{_anchor(group, n)})" for n in ordered)
        out.append(f"| {code(group)} | {links} |")
    out.append("")
    for group, names in GROUP_SCHEMAS.items():
        out += [f"### {group}", ""]
        for option, option_schema in names.items():
            node = options[group][option]
            out += [f"#### `{group}={option}`", ""]
            facts = [f"file `conf/{group}/{option}.yaml`", f"schema `{option_schema.__name__}`"]
            if "_target_" in node:
                facts.append(f"`_target_`: {code(node['_target_'])}")
            elif "mode" in node:
                facts.append(f"mode {code(yaml_value(node['mode']))}")
            default = " The default." if option == defaults[group] else ""
            line = "; ".join(facts)
            out += [f"{line[0].upper()}{line[1:]}.{default}", ""]
            out += _blocks(option_header(CONF_DIR / group / f"{option}.yaml"))
            out += [HEADER, *table(option_schema, node, f"{group}."), ""]
    out += [
        "## Launcher presets",
        "",
        "Hydra launcher configs in `conf/hydra/launcher/`, picked for a sweep with "
        "`-m hydra/launcher=<preset>`; without one a sweep runs its jobs one after another "
        "in the launching process. Each preset extends a Hydra launcher plugin and sets the "
        "keys below (`hydra.launcher.<key>=<value>` changes one); the plugin's documentation "
        "lists the rest. See [Sweeps](../guides/sweeps.md).",
        "",
    ]
    for preset in launcher_presets():
        path = CONF_DIR / "hydra" / "launcher" / f"{preset}.yaml"
        data = yaml.safe_load(path.read_text())
        plugin = next(str(d) for d in data.get("defaults", []) if d != "_self_")
        node = presets[preset]
        out += [f"### hydra/launcher={preset}", ""]
        docs = PLUGIN_DOCS.get(plugin)
        what = (
            f"extends Hydra's [{plugin}]({docs}) launcher"
            if docs
            else f"ms_exp's own launcher (`ms_exp/pool/`), its keys typed by {code(plugin)}"
        )
        out += [
            f"File `conf/hydra/launcher/{preset}.yaml`; {what} "
            f"(`_target_`: {code(node['_target_'])}).",
            "",
        ]
        out += _blocks(option_header(path))
        body = path.read_text().splitlines()
        start = next(n for n, line in enumerate(body) if not line.startswith("#"))
        out += ["```yaml", *body[start:], "```", ""]
    out += [
        "## Experiment presets",
        "",
        "`+experiment=<name>` applies one of the presets in `conf/experiment/` over the "
        "defaults above: see [Presets](../guides/presets.md).",
        "",
    ]
    return "\n".join(out).rstrip("\n") + "\n"


def _anchor(group: str, option: str) -> str:
    """The id MkDocs gives the heading `group=option` (Python-Markdown's toc slugify)."""
    slug = re.sub(r"[^\w\s-]", "", f"{group}={option}").strip().lower()
    return re.sub(r"[-\s]+", "-", slug)


def main(argv: Optional[Sequence[str]] = None, page: Path = PAGE) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--check", action="store_true", help="exit 1 when the page differs from what this writes"
    )
    args = parser.parse_args(argv)
    generated = render()
    if args.check:
        current = page.read_text() if page.is_file() else None
        if current != generated:
            shown = page.relative_to(ROOT) if page.is_relative_to(ROOT) else page
            print(f"{shown} is stale: run {COMMAND}", file=sys.stderr)
            return 1
        return 0
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text(generated)
    print(f"wrote {page.relative_to(ROOT) if page.is_relative_to(ROOT) else page}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
