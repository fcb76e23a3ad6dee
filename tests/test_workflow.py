"""Real Snakemake runs on a tiny config: outputs, no-op reruns, partial reruns, same bytes."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest
import yaml
import zarr

from attnscope import io
from tests.helpers import planned_jobs, snakemake, tiny_config

pytestmark = pytest.mark.integration


@pytest.fixture
def tiny_run(tiny_default_run) -> Path:
    return tiny_default_run


def test_default_target_outputs(tiny_run):
    results = tiny_run / "results"
    clues = pd.read_parquet(results / "data" / "clues.parquet")
    assert clues.groupby("category").size().min() >= 40
    for experiment, n in [("animals-k2", 3), ("food-k3", 2)]:
        prompts = pd.read_parquet(results / "prompts" / "tiny-mistral" / f"{experiment}.parquet")
        generated = pd.read_parquet(results / "clues" / "tiny-mistral" / "trained" / f"{experiment}.parquet")
        assert len(prompts) == len(generated) == n
        assert (generated["n_generated"] <= 6).all()
        table = (results / "tables" / "tiny-mistral" / "trained" / f"{experiment}_clues.md").read_text()
        assert table.count("\n|") == n + 2  # header, rule, one row per target
        meta = io.read_parquet_metadata(
            results / "clues" / "tiny-mistral" / "trained" / f"{experiment}.parquet"
        )
        assert meta["variant"] == "trained" and len(meta["config_digest"]) == 16
    # Every Parquet and store records the rule that wrote it (io.job_metadata), the job's log beside it.
    for path in [*results.rglob("*.parquet"), *results.glob("attention/*/*/*.zarr")]:
        meta = (
            zarr.open_group(path, mode="r").attrs
            if path.suffix == ".zarr"
            else io.read_parquet_metadata(path)
        )
        logs = results / "logs"
        assert (logs / meta["rule"]).is_dir() or (logs / f"{meta['rule']}.log").is_file(), path
        assert meta["attnscope_version"] and len(meta["config_digest"]) == 16, path
    assert (results / "theory" / "checks.md").is_file()
    assert (results / "logs" / "import_clues.log").is_file()
    # Attention stores and metrics for every experiment; the per-head maps only for the
    # default keep_heads target (the tiny run's Animals targets are Ant, Bee, Fox).
    for experiment, n in [("animals-k2", 3), ("food-k3", 2)]:
        store = zarr.open_group(
            results / "attention" / "tiny-mistral" / "trained" / f"{experiment}.zarr", mode="r"
        )
        groups = [store[f"{i:03d}"] for i in range(n)]
        assert all(g.attrs["complete"] and "head_mean" in g and "metrics" in g for g in groups)
        kept = ["attn" in g for g in groups]
        assert kept == ([True, False, False] if experiment == "animals-k2" else [False, False])
        assert "generated" in groups[0].attrs["token_segment"]  # the clue is appended
        table = pd.read_parquet(results / "metrics" / "tiny-mistral" / "trained" / f"{experiment}.parquet")
        assert len(table) == n * 2 * (4 + 1)  # prompts × layers × (heads + head mean)
        summary = (results / "metrics" / "tiny-mistral" / "trained" / f"{experiment}.summary.md").read_text()
        assert "row_entropy" in summary
    assert (results / "benchmarks" / "generate_clues" / "tiny-mistral" / "trained" / "food-k3.tsv").is_file()
    # The knockouts of the claims experiment (config.yaml's knockout: on 2 layers, one window):
    # the effects table, its figure, and the two knockout claims measured.
    effects = pd.read_parquet(results / "knockout" / "tiny-mistral" / "animals-k2.parquet")
    names = [
        "knockout-across-shots-L0-1",
        "knockout-target-shots-L0-1",
        "knockout-control-target-shots-s0-4-L0-1",
        "knockout-target-shotwords-L0-1",
        "knockout-control-target-shotwords-s0-4-L0-1",
    ]
    assert effects["variant"].tolist() == names
    assert (effects["n_prompts"] == 3).all() and effects["delta_token_low"].le(
        effects["delta_token_high"]
    ).all()
    assert effects.set_index("variant")["vs_control"].notna().tolist() == [False, True, False, True, False]
    assert effects.set_index("variant")["mass_ratio"].notna().tolist() == [False, True, False, True, False]
    assert effects["n_seeds"].tolist() == [1, 1, 5, 1, 5]
    text = (results / "knockout" / "tiny-mistral" / "animals-k2.md").read_text()
    assert (
        "| target-shotwords | L0-1 | – | 3 | 3 |" in text
        and "| control of target-shots | L0-1 | 5 | 3 | 3 |" in text
    )
    assert "knockout.greedy: false" in text
    assert (results / "figures" / "tiny-mistral" / "animals-k2_knockout.svg").is_file()
    claims = pd.read_parquet(results / "claims.parquet").set_index("claim")
    assert claims.loc[["built-from-shots", "shots-within"], "verdict"].ne("not measured").all()


def test_rerun_without_changes_runs_nothing(tiny_run):
    assert planned_jobs(tiny_run) == []


def test_changing_one_k_reruns_only_that_experiment(tiny_run, tmp_path):
    config = tiny_config()
    config["experiments"]["food-k3"]["k"] = 4
    (tiny_run / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    food = [
        ("attention_metrics", "model=tiny-mistral, variant=trained, experiment=food-k3"),
        ("build_prompts", "model=tiny-mistral, experiment=food-k3"),
        ("clue_table", "model=tiny-mistral, variant=trained, experiment=food-k3"),
        ("extract_attention", "model=tiny-mistral, variant=trained, experiment=food-k3"),
        ("generate_clues", "model=tiny-mistral, variant=trained, experiment=food-k3"),
        ("rollout", "model=tiny-mistral, variant=trained, experiment=food-k3"),
        ("rollout_figures", "model=tiny-mistral, variant=trained, experiment=food-k3"),
    ]
    combined = [
        ("claims", ""),
        ("clue_comparison", "model=tiny-mistral, experiment=food-k3"),
        ("metric_curves", "model=tiny-mistral, experiment=food-k3"),
    ]
    assert planned_jobs(tiny_run) == sorted(food + combined)
    # Changing the generation budget reruns generation of every experiment and the attention
    # maps that append its clues, nothing upstream.
    config = tiny_config()
    config["generation"]["max_new_tokens"] = 5
    (tiny_run / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    summaries = {"clue_comparison", "metric_curves", "claims"}
    # they read the claims experiment's metrics; the correlations' figure is drawn from their table
    heads = {"head_table", "head_correlations", "head_correlations_figure"}
    assert {rule for rule, _ in planned_jobs(tiny_run)} == {
        "generate_clues",
        "clue_table",
        "extract_attention",
        "attention_metrics",
        "rollout",
        "rollout_figures",
        "knockout",  # the trained clue it scores and its greedy budget
        "knockout_effects",
        "knockout_figure",
    } | summaries | heads
    # Attention options rerun only the attention jobs; ε only the metrics (and what summarises them).
    config = tiny_config()
    config["attention"] = {"keep_heads": "all"}
    (tiny_run / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    assert {rule for rule, _ in planned_jobs(tiny_run)} == {
        "extract_attention",
        "attention_metrics",
        "rollout",
        "rollout_figures",
    } | (summaries - {"clue_comparison"}) | heads
    config["attention"] = {"epsilon": 0.2}
    (tiny_run / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    assert {rule for rule, _ in planned_jobs(tiny_run)} == {"attention_metrics"} | (
        summaries - {"clue_comparison"}
    ) | heads
    (tiny_run / "config.yaml").write_text(yaml.safe_dump(tiny_config(), sort_keys=False))
    assert planned_jobs(tiny_run) == []


def test_a_new_shot_seed_runs_only_its_own_jobs(tiny_run):
    """seeds: [0, 1] keeps food-k3 (seed 0) as it is and adds the replicate food-k3-seed1:
    its own prompts, generation, attention and metrics jobs, and the tables that combine."""
    config = tiny_config()
    config["experiments"]["food-k3"]["seeds"] = [0, 1]
    (tiny_run / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    jobs = planned_jobs(tiny_run)
    replicate = {(rule, wc) for rule, wc in jobs if "experiment=food-k3-seed1" in wc}
    per_prompt = {"build_prompts", "generate_clues", "clue_table", "extract_attention", "attention_metrics"}
    assert per_prompt <= {rule for rule, _ in replicate}
    # Seed 0's jobs are kept; its metric curves pool the replicates, so they redraw.
    assert [rule for rule, wc in jobs if wc.endswith("experiment=food-k3")] == ["metric_curves"]
    assert "claims" in {rule for rule, _ in jobs}  # it reads every experiment's clues
    (tiny_run / "config.yaml").write_text(yaml.safe_dump(tiny_config(), sort_keys=False))
    assert planned_jobs(tiny_run) == []


def test_same_config_gives_the_same_bytes(tiny_run, tiny_cold_run):
    """A second cold run of the same config, of other targets (the session's tiny_cold_run)."""
    tables = sorted((tiny_run / "results").rglob("*.parquet"))
    compared = 0
    for table in tables:
        twin = tiny_cold_run / table.relative_to(tiny_run)
        if twin.exists():
            assert table.read_bytes() == twin.read_bytes(), table
            compared += 1
    assert compared >= 5


def test_embedded_model_end_to_end(tmp_path, embedded_model_run):
    """The embedded SmolLM2 through the real workflow: prepare (the session's run of the rule,
    taken over as a finished job), prompts, generation, table."""
    config = tiny_config("smollm2", **{"animals-k3": {"category": "Animals", "k": 3, "n_targets": 2}})
    config["generation"] = {"max_new_tokens": 24, "batch_size": 2}
    shutil.copytree(embedded_model_run / "results" / "models", tmp_path / "results" / "models")
    output = snakemake(tmp_path, "clues", config=config)
    assert "prepare_model" not in output, "the prepared model is taken over, not rebuilt"
    results = tmp_path / "results"
    clues = pd.read_parquet(results / "clues" / "smollm2" / "trained" / "animals-k3.parquet")
    assert list(clues["target"]) == ["Ant", "Bee"]
    assert clues["clue"].str.len().gt(0).all(), "the trained model writes a clue"
    prompts = pd.read_parquet(results / "prompts" / "smollm2" / "animals-k3.parquet")
    assert "SmolLM" in prompts["template_prefix"][0]
    assert (results / "models" / "smollm2" / "weights" / "model.safetensors").is_file()
