"""kill -9 in the middle of a job: no output looks finished, and a rerun completes it.

A real Snakemake run is killed (SIGKILL to its whole process group, the job's script
included) while generate_clues decodes, while extract_attention fills its partial store,
and while weight_spectra writes its outputs (one job per model, its variants in turn). Every
output the killed job declared is then absent or marked incomplete by Snakemake, and
``--rerun-incomplete`` gives exactly the outputs of an uninterrupted run. The model is a
larger tiny-random Mistral, so that each job lasts long enough to be killed in the middle. A
Parquet write killed at the byte level leaves no table either, and the next write clears its
temporary file.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest

from attnscope import attention, io
from tests.conftest import snakemake_command
from tests.helpers import assert_same_zarr, snakemake, tiny_config

MODEL, EXPERIMENT, N_PROMPTS = "tiny-mistral", "animals-k5", 4
CLUES = f"results/clues/{MODEL}/trained/{EXPERIMENT}.parquet"
STORE = f"results/attention/{MODEL}/trained/{EXPERIMENT}.zarr"
SPECTRA = f"results/spectra/{MODEL}/trained.parquet"
SPECTRA_VARIANTS = ("trained", "random-s0")  # interrupt_config's: trained and spectra.random_variant
OUTPUTS = {
    "generate_clues": (
        CLUES,
        CLUES.replace(".parquet", ".summary.json"),
        CLUES.replace(".parquet", ".timing.tsv"),
    ),
    "extract_attention": (STORE,),
    "weight_spectra": tuple(  # the first variant's table first: the job's first output written
        SPECTRA.replace("trained", variant).replace(".parquet", suffix)
        for variant in SPECTRA_VARIANTS
        for suffix in (".parquet", "_alignment.parquet", ".zarr")
    ),
}
POLL_SECONDS = 0.005


def interrupt_config() -> dict:
    """One experiment of 4 prompts on a 6-layer tiny Mistral: each job runs for seconds."""
    config = tiny_config(**{EXPERIMENT: {"category": "Animals", "k": 5, "n_targets": N_PROMPTS}})
    config["models"][MODEL].update(
        hidden_size=256, intermediate_size=768, num_layers=6, num_heads=8, num_kv_heads=2
    )
    config["generation"] = {"max_new_tokens": 16, "batch_size": 2}
    config["attention"] = {"keep_heads": "all"}
    config["spectra"] = {"variants": ["trained"], "method": "svd64"}
    return config


def text_of(path: Path) -> str:
    return path.read_text() if path.exists() else ""


def marked_incomplete(workdir: Path, output: str) -> bool:
    """Whether Snakemake's marker says `output` is of a job that started and never finished
    (.snakemake/incomplete/<urlsafe base64 of the path>)."""
    key = base64.urlsafe_b64encode(output.encode()).decode()
    return (workdir / ".snakemake" / "incomplete" / key).exists()


def kill_when(workdir: Path, target: str, started: Callable[[Path], bool], what: str) -> str:
    """Run Snakemake on `target` until `started(workdir)`, then SIGKILL its process group;
    return what Snakemake printed."""
    out = workdir / "killed-run.out"
    with out.open("w") as handle:
        command = snakemake_command(workdir, "--cores", "2", target)
        run = subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 600
    try:
        while not started(workdir):
            if run.poll() is not None:
                pytest.fail(
                    f"Snakemake ended (rc {run.returncode}) before {what}:\n{out.read_text()[-3000:]}"
                )
            if time.monotonic() > deadline:
                pytest.fail(f"no {what} within 600 s:\n{out.read_text()[-3000:]}")
            time.sleep(POLL_SECONDS)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(run.pid, signal.SIGKILL)
        run.wait()
    while time.monotonic() < deadline:  # orphaned job processes are reaped a moment later
        try:
            os.killpg(run.pid, 0)
        except ProcessLookupError:
            return out.read_text()
        time.sleep(0.05)
    pytest.fail(f"processes of group {run.pid} survive SIGKILL")


def interrupt(reference: Path, workdir: Path, rule: str, started: Callable[[Path], bool], what: str) -> None:
    """Copy the finished reference run, delete `rule`'s outputs, and kill the job that
    recreates them once `started`. Then no output may look finished."""
    shutil.copytree(reference, workdir, symlinks=True)
    for output in OUTPUTS[rule]:
        path = workdir / output
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()
    printed = kill_when(workdir, OUTPUTS[rule][0], started, what)
    assert not re.search(rf"Finished jobid: \d+ \(Rule: {rule}\)", printed), (
        f"{rule} finished before the kill"
    )
    left = {
        output: marked_incomplete(workdir, output) for output in OUTPUTS[rule] if (workdir / output).exists()
    }
    assert all(left.values()), f"{rule}: outputs look finished after the kill: {left}"


def rerun_incomplete(workdir: Path, target: str) -> None:
    """What a user does after a crash: release the stale lock, rerun the incomplete job."""
    snakemake(workdir, "--unlock")
    snakemake(workdir, "--rerun-incomplete", target)


def complete_groups(store: Path) -> int:
    """Prompt groups of a (partial) attention store marked complete (group attrs `complete`)."""
    count = 0
    for meta in store.glob("*/zarr.json"):
        with contextlib.suppress(FileNotFoundError):
            count += bool(json.loads(meta.read_text()).get("attributes", {}).get("complete"))
    return count


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    """An uninterrupted run of the three jobs (and what they need)."""
    workdir = tmp_path_factory.mktemp("uninterrupted")
    snakemake(workdir, CLUES, STORE, SPECTRA, config=interrupt_config())
    return workdir


@pytest.mark.integration
def test_kill_during_generation(reference, tmp_path):
    """Killed while decoding: no output at all; the rerun writes the same clues and summary."""
    workdir = tmp_path / "run"
    log = workdir / f"results/logs/generate_clues/{MODEL}/trained/{EXPERIMENT}.log"
    interrupt(reference, workdir, "generate_clues", lambda w: "generating" in text_of(log), "decoding")
    assert not any((workdir / output).exists() for output in OUTPUTS["generate_clues"])
    rerun_incomplete(workdir, CLUES)
    assert (workdir / CLUES).read_bytes() == (reference / CLUES).read_bytes()
    summary = CLUES.replace(".parquet", ".summary.json")
    assert json.loads((workdir / summary).read_text()) == json.loads((reference / summary).read_text())


@pytest.mark.integration
def test_kill_during_attention_extraction_resumes(reference, tmp_path):
    """Killed once a prompt group is stored: the final store is absent, the rerun keeps the
    finished groups of the partial store, computes the rest and gives the same store."""
    workdir = tmp_path / "run"
    partial = attention.partial_path(workdir / STORE)
    interrupt(
        reference, workdir, "extract_attention", lambda w: complete_groups(partial) >= 1, "a stored prompt"
    )
    assert not (workdir / STORE).exists()
    done = complete_groups(partial)
    assert 1 <= done < N_PROMPTS, f"{done} of {N_PROMPTS} prompt groups complete: the kill landed too late"
    rerun_incomplete(workdir, STORE)
    log = (workdir / f"results/logs/extract_attention/{MODEL}/trained/{EXPERIMENT}.log").read_text()
    counts = re.search(r"(\d+) prompts computed, (\d+) resumed", log)
    assert counts and (int(counts[1]), int(counts[2])) == (N_PROMPTS - done, done), log
    assert not partial.exists()
    assert_same_zarr(workdir / STORE, reference / STORE)


@pytest.mark.integration
def test_kill_while_writing_spectra(reference, tmp_path):
    """Killed as soon as the first of its outputs (written in turn, variant by variant) appears:
    the rerun writes every variant's outputs as the uninterrupted run did."""
    workdir = tmp_path / "run"
    interrupt(reference, workdir, "weight_spectra", lambda w: (w / SPECTRA).exists(), "the spectra table")
    rerun_incomplete(workdir, SPECTRA)
    for path in OUTPUTS["weight_spectra"]:
        if path.endswith(".zarr"):
            assert_same_zarr(workdir / path, reference / path)
        else:
            assert (workdir / path).read_bytes() == (reference / path).read_bytes(), path
    assert not list((workdir / SPECTRA).parent.glob(".*")), "temporary files left behind"


def test_killed_parquet_write_leaves_no_table(tmp_path):
    """SIGKILL while write_parquet streams a large table: only its temporary file exists,
    and the next write of the same path replaces the table and removes that file."""
    path = tmp_path / "big.parquet"
    code = (
        "import sys, numpy as np, pandas as pd; from attnscope import io; "
        "io.write_parquet(pd.DataFrame({'x': np.random.default_rng(0).random(10_000_000)}), sys.argv[1], {})"
    )
    writer = subprocess.Popen([sys.executable, "-c", code, str(path)])
    tmp = path.with_name(f".{path.name}.tmp-{writer.pid}")
    deadline = time.monotonic() + 120
    while not (tmp.exists() and tmp.stat().st_size > 0):
        assert writer.poll() is None, f"the writer ended (rc {writer.returncode}) before writing"
        assert time.monotonic() < deadline, "the writer wrote nothing within 120 s"
        time.sleep(POLL_SECONDS)
    writer.send_signal(signal.SIGKILL)
    writer.wait()
    assert not path.exists() and tmp.exists()
    io.write_parquet(pd.DataFrame({"x": [1.0]}), path, {"config_digest": "0"})
    assert pd.read_parquet(path)["x"].tolist() == [1.0]
    assert [p.name for p in tmp_path.iterdir()] == [path.name]
