"""Determinism and config digests on real Snakemake runs of a tiny config.

Two cold runs (separate working directories, model preparation included: the session's tiny
run and its second cold run, of STAGE_TARGETS) give the same prepared model, byte-identical
Parquet tables and equal Zarr stores. The config digest that every artifact records changes
when, and only when, an input that decides it changes; an artifact whose digest stays the
same keeps the same bytes.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import zarr

from attnscope import io
from tests.helpers import STAGE_TARGETS, assert_same_zarr, snakemake, tiny_config

pytestmark = pytest.mark.integration


def base_config() -> dict:
    """The config of the session's tiny run (conftest's tiny_default_run)."""
    return tiny_config()


def digests(workdir: Path) -> dict[str, str]:
    """The config digest of every Parquet table and Zarr store under results/, by path."""
    results = workdir / "results"
    found = {
        str(path.relative_to(workdir)): io.read_parquet_metadata(path)["config_digest"]
        for path in results.rglob("*.parquet")
    }
    for path in results.rglob("*.zarr"):
        found[str(path.relative_to(workdir))] = zarr.open_group(path, mode="r").attrs["config_digest"]
    return found


def snapshot(workdir: Path) -> dict[str, bytes]:
    """The bytes of every Parquet table under results/, by path."""
    return {str(p.relative_to(workdir)): p.read_bytes() for p in (workdir / "results").rglob("*.parquet")}


def rerun_with(workdir: Path, change: Callable[[dict], None], *args: str) -> None:
    """Run STAGE_TARGETS after `change(config)` on the base config (`args` after the targets, as
    options such as --forcerun take every word that follows)."""
    config = base_config()
    change(config)
    snakemake(workdir, *STAGE_TARGETS, *args, config=config)


def stage(path: str) -> str:
    """The stage of an artifact: its folder (or name) under results/, e.g. prompts, claims
    (claims.parquet and claims_sensitivity.parquet)."""
    return path.split("/")[1].split(".")[0].removesuffix("_sensitivity")


def assert_digests_follow_bytes(
    before: dict[str, bytes], after: dict[str, bytes], old: dict[str, str], new: dict[str, str]
) -> None:
    """An artifact whose digest stayed the same kept the same bytes."""
    for path, data in before.items():
        if old[path] == new[path]:
            assert after[path] == data, f"{path}: same config digest, different bytes"


@pytest.fixture(scope="module")
def cold_runs(tiny_default_run, tiny_cold_run) -> tuple[Path, Path]:
    """Two cold runs of the base config (conftest): its default target and STAGE_TARGETS."""
    return tiny_default_run, tiny_cold_run


@pytest.fixture
def finished_run(cold_runs, tmp_path) -> Path:
    """A copy of the STAGE_TARGETS run (mtimes kept, so Snakemake sees it finished) to change."""
    copy = tmp_path / "run"
    shutil.copytree(cold_runs[1], copy, symlinks=True)
    return copy


def test_cold_runs_are_identical(cold_runs):
    """The same prepared model, Parquet bytes, Zarr contents and digests in both runs (those of
    STAGE_TARGETS: the default target adds others)."""
    a, b = cold_runs
    models = sorted(p.relative_to(a) for p in (a / "results" / "models").rglob("*") if p.is_file())
    assert any(p.name == "model.safetensors" for p in models)
    for path in models:
        assert (a / path).read_bytes() == (b / path).read_bytes(), f"prepared model differs: {path}"
    stages = {"data", "prompts", "clues", "metrics", "spectra", "theory", "knockout", "claims"}
    tables_a, tables_b = snapshot(a), snapshot(b)
    assert {stage(p) for p in tables_b} == stages
    assert tables_b.keys() <= tables_a.keys()
    for path, data in tables_b.items():
        assert data == tables_a[path], f"{path}: the two cold runs wrote different bytes"
    stores = sorted(p.relative_to(b) for p in (b / "results").rglob("*.zarr"))
    assert {stage(str(p)) for p in stores} == {"attention", "spectra"}
    assert stores == sorted(p.relative_to(a) for p in (a / "results").rglob("*.zarr"))
    for path in stores:
        assert_same_zarr(a / path, b / path)
    recorded = digests(b)
    assert all(len(d) == 16 for d in recorded.values())
    assert {path: d for path, d in digests(a).items() if path in recorded} == recorded


def test_generation_budget_changes_generation_digests_only(finished_run):
    """max_new_tokens reaches the clues and what reads them (attention appends the clues,
    metrics read the attention, the claims read both); prompts, spectra and theory checks
    recomputed under the new config (and a new figures.dpi, which no artifact reads) keep
    digest and bytes."""
    old, before = digests(finished_run), snapshot(finished_run)

    def change(config: dict) -> None:
        config["generation"]["max_new_tokens"] = 3
        config["figures"]["dpi"] = 72

    rerun_with(finished_run, change, "--forcerun", "build_prompts", "weight_spectra", "theory_checks")
    new, after = digests(finished_run), snapshot(finished_run)
    assert new.keys() == old.keys()
    changed = {path for path in old if old[path] != new[path]}
    assert changed == {
        path for path in old if stage(path) in ("clues", "attention", "metrics", "knockout", "claims")
    }
    assert_digests_follow_bytes(before, after, old, new)


def test_one_seed_changes_that_experiment_only(finished_run):
    """food-k3's seed reaches its prompts and everything downstream of them (the claims
    read every experiment's clues), nothing of animals-k2; figures.dpi changes as well, and
    no job of these targets reads it."""
    old, before = digests(finished_run), snapshot(finished_run)

    def change(config: dict) -> None:
        config["experiments"]["food-k3"]["seed"] = 1
        config["figures"]["dpi"] = 72

    rerun_with(finished_run, change)
    new, after = digests(finished_run), snapshot(finished_run)
    assert new.keys() == old.keys()
    changed = {path for path in old if old[path] != new[path]}
    assert changed == {path for path in old if "/food-k3." in path or stage(path) == "claims"}
    assert {stage(path) for path in changed} == {"prompts", "clues", "attention", "metrics", "claims"}
    assert_digests_follow_bytes(before, after, old, new)
