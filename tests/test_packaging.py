"""environment.yml (conda users) and pyproject.toml (pip users) must not drift apart."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def _name(requirement: str) -> str:
    return re.split(r"[\s<>=!~\[;]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _pip_section() -> list[str]:
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pips = [d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d]
    assert len(pips) == 1, "environment.yml must have exactly one pip section"
    return pips[0]


def test_environment_installs_this_package() -> None:
    assert "-e .[dev]" in _pip_section()


def test_environment_and_pyproject_name_the_same_dependencies() -> None:
    project = _pyproject()["project"]
    declared = {_name(r) for r in project["dependencies"] + project["optional-dependencies"]["dev"]}
    in_env = {_name(r) for r in _pip_section() if not r.startswith("-e")}
    assert in_env == declared


def test_environment_and_pyproject_agree_on_version_bounds() -> None:
    project = _pyproject()["project"]
    declared = {_name(r): r.replace(" ", "") for r in project["dependencies"] + project["optional-dependencies"]["dev"]}
    for req in _pip_section():
        if not req.startswith("-e"):
            assert declared[_name(req)] == req.replace(" ", ""), req


def test_ci_constraints_pin_the_kernel_stack() -> None:
    pins = dict(
        line.split("==", 1)
        for line in (ROOT / ".ci" / "constraints.txt").read_text().splitlines()
        if "==" in line and not line.startswith("#")
    )
    for name in ("ipykernel", "papermill", "nbclient", "jupyter_client", "transformers", "zarr"):
        assert name in pins, f"{name} must be pinned for reproducible CI"
    assert "torch" not in pins, "torch is pinned by the Makefile's TORCH variable, not the constraints"


def test_import_sets_passive_openmp_waiting_unless_the_user_chose() -> None:
    import os
    import subprocess

    probe = "import os, xenbench, torch; print(os.environ['OMP_WAIT_POLICY'])"
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "PASSIVE"
    out = subprocess.run([sys.executable, "-c", probe], env={**env, "OMP_WAIT_POLICY": "ACTIVE"},
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "ACTIVE"
