"""Config validation: schema errors and cross-checks name the key, before any job runs."""

import copy
import json
import subprocess

import pytest
import yaml
from snakemake.utils import validate as snakemake_validate

from attnscope import config as cfg
from attnscope import configfile
from attnscope.mapview import MAP_KINDS
from tests.conftest import REPO, snakemake_command, workflow_config

SCHEMA = REPO / "schemas" / "config.schema.yaml"


def default_config() -> dict:
    return workflow_config()


def checked(config: dict) -> cfg.Plan:
    configfile.validate(config, SCHEMA)
    return cfg.plan(config)


def test_default_config_is_valid_and_gets_defaults():
    config = default_config()
    del config["generation"]
    plan = checked(config)
    assert config["generation"] == {"max_new_tokens": 32, "batch_size": 8, "clean_up": "attnscope"}
    assert config["models"]["smollm2"]["quantization"] == "none"
    assert config["data"]["clue_files"][0]["format"] == "auto"
    assert plan.models == ["smollm2"]
    animals = plan.experiments["animals-k3"]
    assert animals.targets[:3] == ["Ant", "Bee", "Fox"] and len(animals.targets) == 30
    assert animals.prompt_spec == {"category": "Animals", "k": 3, "seed": 0, "shot_draw": "attnscope"}
    assert plan.experiments["animals-k5"].variants == ["trained"]
    assert plan.claims_experiments == ["animals-k3"] and plan.random_variant == "random-s0"
    randoms = ["random-s0", "random-s1", "random-s2"]
    assert plan.spectra_variants == ["trained", *randoms, "qkscale-a2", "qkscale-a0.5"]
    # Three shot draws of animals-k3, the later two of the trained model only.
    assert animals.variants == ["trained", *randoms, "qkscale-a2", "qkscale-a0.5"]
    assert plan.replicates("animals-k3") == ["animals-k3", "animals-k3-seed1", "animals-k3-seed2"]
    assert [plan.experiments[f"animals-k3-seed{s}"].variants for s in (1, 2)] == [["trained"]] * 2
    assert plan.experiments["animals-k3-seed2"].prompt_spec["seed"] == 2
    # figures.maps: 2 experiments × 5 targets word grids, 4 kinds of Ant, 2 kinds × 4 variants of Ant
    assert len(plan.map_figures) == 10 + 4 + 2 * 4 - 2  # Ant's trained word_grid twice
    assert plan.map_figures[("animals-k3", "trained", "Ant", "cosine")] == "Ant"
    assert not plan.warnings


def test_the_schema_offers_the_map_kinds_that_are_drawn():
    """figures.maps kinds: the schema's enum and default are the kinds plots.attention_figure
    draws and the report labels (attnscope.mapview.MAP_KINDS)."""
    kinds = configfile.load_schema(SCHEMA)["properties"]["figures"]["properties"]["maps"]["items"][
        "properties"
    ]["kinds"]
    assert sorted(kinds["items"]["enum"]) == sorted(MAP_KINDS)
    assert set(kinds["default"]) <= set(MAP_KINDS)


@pytest.mark.parametrize(
    ("section", "keys"),
    [
        ("attention", cfg.ATTENTION_KEYS),
        ("spectra", cfg.SPECTRA_KEYS),
        ("figures", cfg.FIGURE_KEYS),
        ("theory", cfg.THEORY_FIGURE_KEYS),
    ],
)
def test_config_slices_are_keys_of_their_section(section, keys):
    """A slice names keys the schema has (a misspelt key would fail at every job, not here)."""
    assert set(keys) <= set(configfile.load_schema(SCHEMA)["properties"][section]["properties"])
    config = default_config()
    configfile.validate(config, SCHEMA)
    assert list(cfg.config_slice(config, section, keys)) == list(keys)


def test_plan_answers_what_the_rules_ask():
    """The figures of one store, the runs one metric-curve figure pools and what the claims are
    measured on, for the default config (figures.maps: Ant's grids under four variants of
    animals-k3, and its passes of the trained model)."""
    plan = checked(default_config())
    assert plan.store_maps("animals-k3", "random-s0") == {
        "Ant": {"target": "Ant", "kinds": ["word_grid", "token_grid"]}
    }
    assert plan.store_maps("animals-k3", "trained")["Ant"]["kinds"] == [
        "word_grid",
        "token_grid",
        "cosine",
        "word_pass",
        "token_pass",
    ]
    assert plan.store_maps("animals-k3", "random-s1") == {}
    runs = plan.replicate_runs(["smollm2"], "animals-k3")
    assert runs[0] == ["smollm2", "trained", "animals-k3"] and runs[-2:] == [
        ["smollm2", "trained", "animals-k3-seed1"],
        ["smollm2", "trained", "animals-k3-seed2"],
    ]
    assert len(runs) == len(plan.experiments["animals-k3"].variants) + 2
    assert plan.replicate_runs(["a", "b"], "animals-k3") == [["a", *r[1:]] for r in runs] + [
        ["b", *r[1:]] for r in runs
    ]
    spec = plan.claims_spec()
    assert spec["experiments"] == ["animals-k3"] and spec["thesis_models"] == []
    assert spec["runs"]["animals-k3-seed1"] == {
        "variants": ["trained"],
        "seed": 1,
        "replicate_group": "animals-k3",
    }
    config = default_config()
    config["model"] = ["smollm2", "mistral7b"]
    assert checked(config).claims_spec()["thesis_models"] == ["mistral7b"]


def test_replicate_variants_must_be_the_experiments_own():
    config = default_config()
    config["experiments"]["animals-k3"]["replicate_variants"] = ["trained", "qkscale-a3"]
    with pytest.raises(cfg.ConfigError, match=r"experiments.animals-k3.replicate_variants: \['qkscale-a3'\]"):
        checked(config)
    config["experiments"]["animals-k3"]["replicate_variants"] = None  # every variant in every draw
    plan = checked(config)
    assert plan.experiments["animals-k3-seed1"].variants == plan.experiments["animals-k3"].variants


def test_plan_skips_figures_the_run_lacks_with_a_warning():
    config = default_config()
    config["figures"]["maps"] = [
        {
            "experiments": ["animals-k3", "birds"],
            "variants": ["trained", "qkscale-a3"],
            "targets": ["ant", "Yeti"],
            "kinds": ["word_grid"],
        }
    ]
    plan = checked(config)
    assert plan.map_figures == {("animals-k3", "trained", "Ant", "word_grid"): "Ant"}
    assert plan.warnings == [
        "figures.maps[0]: animals-k3 has no qkscale-a3, Yeti; skipped",
        "figures.maps[0]: no experiment 'birds' in this run; skipped",
    ]


def mutated(path: list, value) -> dict:
    config = default_config()
    node = config
    for key in path[:-1]:
        node = node[key]
    if value is KeyError:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return config


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (
            ["experiments", "animals-k3", "shots"],
            3,
            r"experiments\.animals-k3: Additional properties.*'shots'",
        ),
        (["generation", "batchsize"], 8, r"generation: Additional properties.*allowed keys: batch_size"),
        (["verbose"], True, r"\(top level\): Additional properties"),
        (
            ["experiments", "animals-k3", "k"],
            "3",
            r"experiments\.animals-k3\.k: '3' is not of type 'integer'",
        ),
        (
            ["experiments", "animals-k3", "k"],
            0,
            r"experiments\.animals-k3\.k: 0 is less than the minimum of 1",
        ),
        (["generation", "max_new_tokens"], -1, r"generation\.max_new_tokens: -1 is less than"),
        (["models", "smollm2", "dtype"], "fp8", r"models\.smollm2\.dtype: 'fp8' is not one of"),
        (["data", "clue_files"], KeyError, r"data: 'clue_files' is a required property"),
        (["heads", "probe_length"], 1, r"heads\.probe_length: 1 is less than the minimum of 2"),
        (["knockout"], {"edges": ["target-words"]}, r"knockout\.edges\[0\]: 'target-words' is not one of"),
        (["knockout"], {"windows": [[0]]}, r"knockout\.windows\[0\]: \[0\] is too short"),
    ],
)
def test_schema_errors_name_the_key(path, value, message):
    with pytest.raises(cfg.ConfigError, match=message):
        checked(mutated(path, value))


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (["model"], "gpt5", r"model: unknown model key 'gpt5'"),
        (
            ["experiments", "animals-k3", "k"],
            74,
            r"experiments\.animals-k3\.k: category 'Animals' has 74 clues",
        ),
        (
            ["experiments", "animals-k3", "category"],
            "Birds",
            r"experiments\.animals-k3\.category: no accepted clues",
        ),
        (
            ["experiments", "animals-k3", "variants"],
            ["trained", "qkscale-a0"],
            r"experiments\.animals-k3\.variants\[1\]: .*alpha must be > 0",
        ),
        (["experiments", "animals-k3", "variants"], ["scaled"], r"variants\[0\]: unknown variant 'scaled'"),
        (["experiments", "animals-k3", "targets"], ["Ant", "ant"], r"repeated target words"),
        (
            ["models", "smollm2", "initializer_range"],
            None,
            r"models\.smollm2\.initializer_range: required for source: embedded.*SmolLM2-135M: 0\.0416",
        ),
        (["models", "mistral7b", "id"], KeyError, None),
        (["spectra", "variants"], ["trained", "qkscale-a0"], r"spectra\.variants\[1\]: .*alpha must be > 0"),
        (
            ["spectra", "random_variant"],
            "qkscale-a2",
            r"spectra\.random_variant: 'qkscale-a2' does not match",
        ),
        (["claims", "experiment"], "animals-k9", r"claims\.experiment: no experiment 'animals-k9'"),
    ],
)
def test_cross_check_errors_name_the_key(path, value, message):
    config = mutated(path, value)
    if message is None:  # a model that is defined but not selected is not checked
        checked(config)
        config["model"] = "mistral7b"
        message = r"models\.mistral7b\.id: required for source: hub"
    with pytest.raises(cfg.ConfigError, match=message):
        checked(config)


def test_k_needs_k_plus_one_clues(tmp_path):
    clue_file = tmp_path / "tiny.csv"
    clue_file.write_text("Word;Clue\nAnt;Tiny worker.\nBee;Buzzes.\nOwl;Hoots.\n")
    other_file = tmp_path / "birds.csv"  # a target must have a clue somewhere, not in its own category
    other_file.write_text("Word;Clue\nEmu;Flightless runner.\n")
    config = default_config()
    config["data"]["clue_files"] = [
        {"path": str(clue_file), "category": "Tiny"},
        {"path": str(other_file), "category": "Birds"},
    ]
    config["experiments"] = {"tiny": {"category": "Tiny", "k": 2, "targets": ["Ant", "Emu"]}}
    checked(copy.deepcopy(config))  # 3 clues: k=2 works for a target in the pool and one outside it
    config["experiments"]["tiny"]["k"] = 3
    with pytest.raises(cfg.ConfigError, match=r"experiments\.tiny\.k: .*'Ant'; k=3 shots need at least 4"):
        checked(config)


def test_duplicate_yaml_keys_are_refused(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("experiments:\n  a: {category: Animals, k: 3}\n  a: {category: Animals, k: 5}\n")
    with pytest.raises(cfg.ConfigError, match=r"config.yaml:3: duplicate key 'a' \(first on line 2\)"):
        configfile.check_yaml_file(path)


def test_validate_fills_the_defaults_snakemakes_validate_fills():
    """The defaults come from the schema already read (the jsonschema FAQ recipe that
    snakemake.utils.validate runs on the file again): the same filled config, in the same key order,
    for a config with whole sections and single keys left out."""
    config = default_config()
    for section in ("knockout", "heads", "theory", "claims"):
        config.pop(section, None)
    for key in ("share_prefix", "epsilon"):
        config["attention"].pop(key, None)
    ours, theirs = copy.deepcopy(config), copy.deepcopy(config)
    configfile.validate(ours, SCHEMA)
    snakemake_validate(theirs, str(SCHEMA), set_default=True)
    assert ours["knockout"]["control_seeds"] == 5 and ours["attention"]["epsilon"] == 0.1
    assert json.dumps(ours) == json.dumps(theirs)


@pytest.mark.parametrize(
    ("text", "where", "problem"),
    [
        (
            "model: smollm2\nexperiments:\n  a: {category: Animals, k: 3\nplots: 1\n",
            "config.yaml:4:6",
            "',' or '}'",
        ),
        ("model: smollm2\nattention:\n\tkeep_heads: all\n", "config.yaml:3:1", "'\\t'"),
        ("model: smollm2\nexperiments:\n  a: b: c\n", "config.yaml:3:7", "mapping values"),
    ],
)
def test_a_yaml_syntax_error_names_file_line_and_column(tmp_path, text, where, problem):
    path = tmp_path / "config.yaml"
    path.write_text(text)
    with pytest.raises(cfg.ConfigError) as error:
        configfile.check_yaml_file(path)
    message = str(error.value)
    assert message.startswith(f"{tmp_path}/{where}: not valid YAML") and problem in message, message
    assert "indent with spaces" in message


def test_snakemake_shows_the_yaml_syntax_error_with_its_line(tmp_path):
    text = yaml.safe_dump(default_config(), sort_keys=False).replace("\nexperiments:\n", "\nexperiments:\n\t")
    (tmp_path / "config.yaml").write_text(text)
    line = text.splitlines().index("experiments:") + 2
    run = subprocess.run(
        snakemake_command(tmp_path, "--cores", "1", "-n"), capture_output=True, text=True, timeout=300
    )
    output = run.stdout + run.stderr
    assert run.returncode != 0 and f"config.yaml:{line}:1: not valid YAML" in output, output[-3000:]
    assert "Traceback" not in output


def test_repeated_targets_in_a_target_file_name_the_file_and_lines(tmp_path):
    targets = tmp_path / "animals.txt"
    targets.write_bytes(b"\xef\xbb\xbfAnimals\r\nAnt\r\nBee\r\n\r\n# birds\r\nant\r\nFox\r\nBee\r\n")
    config = default_config()
    config["data"]["targets"]["Animals"] = str(targets)
    for spec in config["experiments"].values():
        spec.pop("n_targets", None)
    with pytest.raises(cfg.ConfigError) as error:
        checked(config)
    message = str(error.value)
    assert message.startswith(f"{targets} (data.targets.Animals): repeated target words"), message
    assert message.endswith("'Ant' on lines 2, 6; 'Bee' on lines 3, 8; keep one line per word"), message
    assert "experiments." not in message


def test_snakemake_refuses_a_bad_config_before_any_job(tmp_path):
    config = mutated(["experiments", "animals-k5", "k"], 0)
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    run = subprocess.run(
        snakemake_command(tmp_path, "--cores", "1"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode != 0
    assert "experiments.animals-k5.k: 0 is less than the minimum of 1" in run.stdout + run.stderr
    assert not (tmp_path / "results").exists()


def test_shot_seeds_become_replicate_experiments_with_different_prompts():
    from attnscope import data, prompts

    config = default_config()
    config["experiments"]["animals-k3"]["seeds"] = [0, 4]
    plan = checked(config)
    first, second = plan.experiments["animals-k3"], plan.experiments["animals-k3-seed4"]
    assert (first.seed, second.seed) == (0, 4) and first.targets == second.targets
    assert (
        first.replicate_group == second.replicate_group == "animals-k3"
        and second.replicate_of == "animals-k3"
    )
    assert list(plan.experiments)[:2] == ["animals-k3", "animals-k3-seed4"]
    clues, _ = data.import_clues(config["data"]["clue_files"])
    pool = clues[clues["category"] == "Animals"]
    shots = [prompts.draw_shots(pool, first.targets, e.prompt_spec) for e in (first, second)]
    words = [[list(s["word"]) for s in draw] for draw in shots]
    assert words[0] != words[1] and sum(a == b for a, b in zip(*words)) < len(first.targets) // 2
    # A single seed, listed or not, keeps the experiment's name (nothing reruns).
    config["experiments"]["animals-k3"]["seeds"] = [0]
    assert "animals-k3-seed4" not in checked(config).experiments
    config["experiments"]["animals-k3"]["seeds"] = [0, 5]
    config["experiments"]["animals-k3-seed5"] = dict(config["experiments"]["animals-k5"])
    with pytest.raises(
        cfg.ConfigError, match=r"experiments\.animals-k3\.seeds: replicate 'animals-k3-seed5'"
    ):
        checked(config)


def test_the_full_analysis_config_plans_replicates_of_every_experiment():
    config = default_config()
    overlay = yaml.safe_load((REPO / "config" / "examples" / "replicates.yaml").read_text())
    config.update(overlay)  # Snakemake merges --configfile the same way for these top-level keys
    plan = checked(config)
    assert len(plan.experiments) == 25 and plan.claims_experiments == ["animals-k3", "food-k3", "sports-k3"]
    groups = {e.replicate_group for e in plan.experiments.values()}
    assert groups == {"animals-k3", "food-k3", "sports-k3", "animals-k5", "animals-k8"}
    assert {e.seed for e in plan.experiments.values() if e.replicate_group == "food-k3"} == set(range(5))
    jobs = sum(len(e.variants) for e in plan.experiments.values())
    assert jobs == 3 * 5 * 8 + 2 * 5  # generation (and attention) jobs, as the file's header says
