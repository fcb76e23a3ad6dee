"""The conda environments in envs/ carry exactly pyproject.toml's dependencies and bounds."""

from __future__ import annotations

import re
import tomllib

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.version import Version

from tests.conftest import REPO

# conda-forge names that differ from the PyPI distribution
CONDA_NAMES = {"pytorch": "torch"}


def pyproject_requirements() -> dict[str, Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return {Requirement(r).name: Requirement(r) for r in project["dependencies"]}


def conda_requirement(spec: str) -> Requirement:
    """`pytorch[version='>=2.4',build='cpu*']` or `numpy>=1.26` as a PyPI requirement."""
    match = re.fullmatch(r"([\w.-]+)\[version='([^']+)'.*\]", spec)
    name, version = match.groups() if match else re.fullmatch(r"([\w.-]+)(.*)", spec).groups()
    return Requirement(CONDA_NAMES.get(name, name) + version)


def env_requirements(path) -> tuple[dict[str, Requirement], list]:
    env = yaml.safe_load(path.read_text())
    found, pip_lines = {}, []
    for entry in env["dependencies"]:
        if isinstance(entry, dict):
            pip_lines = entry["pip"]
            continue
        if entry.split(">")[0].split("=")[0] in ("python", "pip"):
            continue
        requirement = conda_requirement(entry)
        found[requirement.name] = requirement
    for line in pip_lines:
        if not line.startswith("-e"):
            requirement = Requirement(line)
            found[requirement.name] = requirement
    return found, pip_lines


@pytest.mark.parametrize("name", ["attnscope-cpu.yaml", "attnscope-cuda.yaml"])
def test_env_matches_pyproject(name):
    found, pip_lines = env_requirements(REPO / "envs" / name)
    wanted = pyproject_requirements()
    assert sorted(found) == sorted(wanted)
    for key, requirement in wanted.items():
        assert (found[key].specifier, found[key].extras) == (requirement.specifier, requirement.extras), key
    assert pip_lines[-1].startswith("-e ..")  # attnscope itself, from this checkout
    build = yaml.safe_load((REPO / "envs" / name).read_text())["dependencies"]
    torch_build = next(e for e in build if isinstance(e, str) and e.startswith("pytorch"))
    assert ("cuda*" in torch_build) == ("cuda" in name)


def test_floors_file_pins_every_lower_bound():
    """constraints-floors.txt (the lowest-versions CI step) pins each dependency of pyproject.toml,
    the test extra included, at its lower bound (torch at the CPU wheel of constraints.txt)."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    wanted = [Requirement(r) for r in project["dependencies"] + project["optional-dependencies"]["test"]]
    text = (REPO / "constraints-floors.txt").read_text()
    pins = [Requirement(line) for line in text.splitlines() if line and not line.startswith("#")]
    pinned = {pin.name: pin for pin in pins}
    assert sorted(pinned) == sorted(r.name for r in wanted)
    for requirement in wanted:
        (pin,) = pinned[requirement.name].specifier
        if requirement.name == "torch":
            assert str(pinned["torch"]) in (REPO / "constraints.txt").read_text()
            continue
        floor = next(s.version for s in requirement.specifier if s.operator in (">=", "=="))
        assert pin.operator == "==" and Version(pin.version) == Version(floor), requirement.name
