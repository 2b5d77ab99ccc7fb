"""Layering of the xenbench package: a unit imports only from its own layer or lower ones.

Every ``import`` of a xenbench module is checked, at module level or inside a function (lazy imports
are still dependencies), including ``if TYPE_CHECKING:`` blocks. Layers, lowest first:

====  =============  ==========================================================================
 0    base           the package root, errors, _validation, _io, _markup, _ray, _device, _lazy, integrity, metrics, sampling,
                    provenance
 1    data           xenbench.data: datasets, readers, beir, zeshel, sources, wordnet, store
 2    models         xenbench.models: crossencoder, pairs, templates, references, loading, scorers, scoring, packed,
                    jobs, distributed, cache, fingerprint, probe, first_stages, retrievers, linking, train
 3    methods        xenbench.methods: cur, adacur (package), baselines, axn, mf, pefa, ccsa, gar, trace
 4    studies        xenbench.studies: one driver per notebook (stats, rank, adacur, axn, pefa, ccsa, compare), their
                    inputs (setup, splits, corpus), the registry of methods, the protocol, labels, findings,
                    witnesses, records
 5    presentation   xenbench.viz: plots, widgets
 6    entry points   xenbench.harness (spec, params, sizes, preflight, kernel, results, report, runner), sweep,
                    cli
====  =============  ==========================================================================

A subpackage is one unit: its modules share its layer and may import each other. ARCHITECTURE.md
explains the layers; a new top-level module or subpackage must be added to :data:`LAYERS`.

Beyond the layers: every public name is defined once in the package (:func:`test_public_names_are_defined_once`),
``methods/`` builds no figures, each notebook calls exactly one ``studies/`` module as its driver, the one
ARCHITECTURE.md names for it (:data:`DRIVERS`), and inside ``models/`` and ``data/`` the engine and the types never
import what is built on them (:data:`TIERS`).
"""
from __future__ import annotations

import ast
import json
import re
from collections import defaultdict
from pathlib import Path

import pytest

import xenbench
from xenbench.studies.notebooks import KINDS, NOTEBOOKS

PACKAGE = Path(xenbench.__file__).parent

LAYERS: list[tuple[str, set[str]]] = [
    ("base", {"xenbench", "errors", "_validation", "_io", "_markup", "_ray", "_device", "_lazy", "integrity", "metrics",
              "sampling", "provenance"}),
    ("data", {"data"}),
    ("models", {"models"}),
    ("methods", {"methods"}),
    ("studies", {"studies"}),
    ("presentation", {"viz"}),
    ("entry points", {"harness", "sweep", "cli"}),
]
LAYER = {unit: i for i, (_, units) in enumerate(LAYERS) for unit in units}


def _unit(module: str) -> str:
    """``xenbench.viz.plots._style`` -> ``plots``; ``xenbench`` -> ``xenbench`` (the package root)."""
    parts = module.split(".")
    assert parts[0] == "xenbench", module
    return parts[1] if len(parts) > 1 else "xenbench"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_submodule(dotted: str) -> bool:
    rel = Path(*dotted.split(".")[1:])
    return (PACKAGE / rel).with_suffix(".py").is_file() or (PACKAGE / rel / "__init__.py").is_file()


def imports_of(path: Path, source: str | None = None) -> list[tuple[int, str]]:
    """(line, imported xenbench module) of every import in ``path`` (or ``source`` as if it were that file),
    at any depth of the syntax tree."""
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8") if source is None else source, filename=str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "xenbench"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against this module's package
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            if source.split(".")[0] != "xenbench":
                continue
            for a in node.names:  # `from xenbench import data` imports the subpackage xenbench.data
                sub = f"{source}.{a.name}"
                out.append((node.lineno, sub if _is_submodule(sub) else source))
    return out


MODULES = sorted(PACKAGE.rglob("*.py"))


def test_every_module_has_a_layer():
    units = {_unit(_module_name(p)) for p in MODULES}
    assert not units - LAYER.keys(), f"modules without a layer (add them to LAYERS): {sorted(units - LAYER.keys())}"
    assert not LAYER.keys() - units, f"LAYERS names modules that do not exist: {sorted(LAYER.keys() - units)}"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: _module_name(p))
def test_imports_go_down_the_layers(path):
    unit = _unit(_module_name(path))
    bad = [f"line {line}: {target} (layer {LAYER[_unit(target)]} {LAYERS[LAYER[_unit(target)]][0]})"
           for line, target in sorted(set(imports_of(path))) if LAYER[_unit(target)] > LAYER[unit]]
    assert not bad, (f"{_module_name(path)} (layer {LAYER[unit]} {LAYERS[LAYER[unit]][0]}) imports higher "
                     f"layers: {bad}")


def test_the_parser_sees_lazy_relative_and_package_imports():
    src = ("import numpy\nfrom xenbench import __version__, data\nimport xenbench.viz.plots._style\n"
           "def f():\n    from xenbench.studies.setup import Setup\n    from ..methods import cur\n"
           "    from . import rank\n")
    got = [target for _, target in imports_of(PACKAGE / "studies" / "stats.py", src)]
    assert got == ["xenbench", "xenbench.data", "xenbench.viz.plots._style", "xenbench.studies.setup",
                   "xenbench.methods.cur", "xenbench.studies.rank"]


def test_architecture_md_lists_the_same_layers():
    text = (PACKAGE.parent / "ARCHITECTURE.md").read_text(encoding="utf-8")
    for name, units in LAYERS:
        assert name in text, name
        for unit in units - {"xenbench"}:
            assert f"`{unit}`" in text, unit


# ----------------------------------------------------------------------------------------------
# one name per thing
# ----------------------------------------------------------------------------------------------
#: Clashes that live in modules other work is reshaping (each names its modules); the test fails when one is
#: resolved and still listed, so this list only shrinks. Nothing may be added to it.
KNOWN_CLASHES: dict[str, str] = {
    "findings": "each studies/findings/<notebook>.py registers its `findings` (reached through findings.registered())",
    "block": "studies.findings, .checkpoints and .claims: the generated block of docs/FINDINGS.md, docs/MODELS.md, README.md",
    "verify": "integrity.verify (weight digests) and studies.witnesses.verify (committed results)",
}


def public_definitions() -> dict[str, list[str]]:
    """Public function or class name -> the modules that *define* it at top level; a name imported from elsewhere
    (a re-export) is not a definition."""
    defined: dict[str, list[str]] = defaultdict(list)
    for path in MODULES:
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and not node.name.startswith("_"):
                defined[node.name].append(_module_name(path))
    return defined


def test_public_names_are_defined_once():
    clashes = {name: modules for name, modules in public_definitions().items() if len(modules) > 1}
    new = {name: modules for name, modules in clashes.items() if name not in KNOWN_CLASHES}
    assert not new, ("one name, several things (rename one, or re-export it from the other module with an import): "
                     f"{new}")
    resolved = sorted(KNOWN_CLASHES.keys() - clashes.keys())
    assert not resolved, f"resolved: remove from KNOWN_CLASHES {resolved}"


def test_the_clash_check_sees_a_clash_and_not_a_re_export():
    assert "Setup" in public_definitions() and public_definitions()["Setup"] == ["xenbench.studies.setup"]
    # wordnet_el_domains is defined in data.sources and re-exported by studies.corpus: one definition
    assert public_definitions()["wordnet_el_domains"] == ["xenbench.data.sources"]
    assert len(public_definitions()["verify"]) == 2  # a real clash is seen


def test_methods_build_no_figures_and_run_no_notebooks():
    """``methods/`` holds estimators: no plotting library, no study of the studies layer (checked by the layers)."""
    for path in (p for p in MODULES if _module_name(p).startswith("xenbench.methods")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        imported |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        assert not {m for m in imported if m.split(".")[0] in {"plotly", "ipywidgets", "matplotlib"}}, path


# ----------------------------------------------------------------------------------------------
# one studies/ module drives each notebook
# ----------------------------------------------------------------------------------------------
#: Notebook -> its driver: the one ``studies/`` module it runs (the one table of notebooks,
#: ``xenbench.studies.notebooks.NOTEBOOKS``, and ARCHITECTURE.md's table).
DRIVERS: dict[str, str] = {name: nb.driver for name, nb in NOTEBOOKS.items()}
#: ``studies/`` modules a notebook may read its inputs from besides its driver (and ``protocol``, its splits, choices
#: on dev and verdict rule; ``records``, which packs the raw records its results file saves; ``labels``, which
#: summarizes the label measures and writes the ranked lists out), and the conclusions every notebook shows.
INPUTS = {"setup", "splits", "corpus", "protocol", "records", "labels"}
CONCLUSIONS = "findings"
NOTEBOOK_DIR = PACKAGE.parent / "notebooks"


def _studies_calls(notebook: Path) -> tuple[set[str], set[str]]:
    """(studies modules called as ``xb.studies.<m>``, studies modules called by their short name ``xb.<m>``)."""
    code = "\n".join("".join(c["source"]) for c in json.loads(notebook.read_text(encoding="utf-8"))["cells"]
                      if c["cell_type"] == "code")
    long = set(re.findall(r"\bxb\.studies\.(\w+)", code))
    short = {m for m in re.findall(r"\bxb\.(\w+)\.", code) if xenbench._SUBMODULES.get(m, "").startswith("studies.")}
    return long, short


def test_every_notebook_is_in_the_driver_table():
    assert {p.stem for p in NOTEBOOK_DIR.glob("*.ipynb")} == set(DRIVERS)


@pytest.mark.parametrize("name", sorted(DRIVERS))
def test_each_notebook_calls_one_driver_as_xb_studies(name):
    long, short = _studies_calls(NOTEBOOK_DIR / f"{name}.ipynb")
    assert short <= {CONCLUSIONS}, f"{name} calls studies modules by their short names: {short - {CONCLUSIONS}}"
    assert long - INPUTS == {DRIVERS[name]}, f"{name}: drivers {long - INPUTS}, expected {DRIVERS[name]}"


def test_architecture_md_names_each_notebooks_driver():
    text = (PACKAGE.parent / "ARCHITECTURE.md").read_text(encoding="utf-8")
    for name, driver in DRIVERS.items():
        assert re.search(rf"\|\s*`{name}`\s*\|\s*`studies\.{driver}`", text), (name, driver)


#: Inside a subpackage, tiers lowest first: a module never imports one of a higher tier. The scoring engine and
#: the CE it runs know nothing of the stores, Ray and the cache that call them (``scoring.row_scorer`` is the
#: seam); the ``Dataset`` type and the line readers know nothing of the loaders built on them.
TIERS: dict[str, list[set[str]]] = {
    "models": [{"templates", "references", "pairs", "crossencoder", "loading", "packed", "scorers", "scoring"},
               {"jobs", "distributed", "cache", "fingerprint", "probe"}],
    "data": [{"readers", "datasets"}, {"trec", "beir", "zeshel", "sources"}],
}


@pytest.mark.parametrize("package", sorted(TIERS))
def test_tiers_inside_a_subpackage(package):
    tiers = TIERS[package]
    assert set().union(*tiers) <= {p.stem for p in (PACKAGE / package).glob("*.py")}, "TIERS names a missing module"
    bad = []
    for i, tier in enumerate(tiers):
        higher = {f"xenbench.{package}.{m}" for t in tiers[i + 1:] for m in t}
        for module in sorted(tier):
            path = PACKAGE / package / f"{module}.py"
            bad += [f"{package}.{module} line {line}: {target}" for line, target in imports_of(path) if target in higher]
    assert not bad, f"imports of a higher tier: {bad}"


# ----------------------------------------------------------------------------------------------
# ARCHITECTURE.md's rules, each checked
# ----------------------------------------------------------------------------------------------
def test_short_names_are_the_public_modules_of_every_layer_but_the_studies():
    """``xb.<name>``: every public module of the root and of ``data``, ``models``, ``methods``, ``viz``, the
    subpackages and the entry points; of layer 4 only ``findings`` (a notebook names its driver as
    ``xb.studies.<name>``)."""
    expected = {p.stem: p.stem for p in PACKAGE.glob("*.py") if not p.stem.startswith("_")}
    expected |= {sub: sub for sub in ("data", "models", "methods", "studies", "viz", "harness")}
    for sub in ("data", "models", "methods", "viz"):
        for p in (PACKAGE / sub).iterdir():
            if not p.stem.startswith("_") and (p.suffix == ".py" or (p / "__init__.py").is_file()):
                expected[p.stem] = f"{sub}.{p.stem}"
    expected[CONCLUSIONS] = f"studies.{CONCLUSIONS}"
    assert xenbench._SUBMODULES == expected


def test_exception_classes_outside_errors_are_private():
    """Every exception a caller can catch is in ``xenbench.errors``; one defined elsewhere is a private signal."""
    public = []
    for path in MODULES:
        if _module_name(path) == "xenbench.errors":
            continue
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                bases = {b.id if isinstance(b, ast.Name) else b.attr if isinstance(b, ast.Attribute) else ""
                         for b in node.bases}
                if any(b.endswith(("Error", "Exception")) or b in ("BaseException", "Warning") for b in bases):
                    public.append(f"{_module_name(path)}.{node.name}")
    assert public == [], f"exception classes to define in xenbench.errors: {public}"


#: What the scoring jobs, their Ray backend and the score cache import from the engine: rows are scored only through
#: ``row_scorer``; the rest are its settings, checks, timing and progress bar (ARCHITECTURE.md, layer 2).
ENGINE_SEAM = {"row_scorer", "DEFAULT_BATCH_SIZE", "Precision", "ScoreTiming", "check_scoring_args",
               "scorer_device_type", "default_query_chunk", "on_device", "progress_bar"}


def test_jobs_reach_the_engine_only_through_row_scorer_and_its_settings():
    for module in ("jobs", "distributed", "cache"):
        tree = ast.parse((PACKAGE / "models" / f"{module}.py").read_text(encoding="utf-8"))
        names = {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
                 and n.module in ("xenbench.models.scoring", "scoring") for a in n.names}
        assert names <= ENGINE_SEAM, f"models.{module} imports {sorted(names - ENGINE_SEAM)} from the engine"
        assert not any(isinstance(n, ast.Import) and any(a.name == "xenbench.models.scoring" for a in n.names)
                       for n in ast.walk(tree)), module


#: What each notebook needs besides its driver (ARCHITECTURE.md, "What a notebook is made of"): its profiles, its
#: findings, the re-derivation of its summaries and its witnesses, each registered under the notebook's name.
def test_every_notebook_has_each_file_and_registration_a_notebook_needs():
    from xenbench.studies import findings, records, witnesses

    text = (PACKAGE.parent / "ARCHITECTURE.md").read_text(encoding="utf-8")
    for needed in ("notebooks/<notebook>.ipynb", "notebooks/<notebook>.yaml", "studies/<driver>",
                   "studies/findings/", "studies/records.py", "studies/witnesses.py", "tests/test_architecture.py",
                   "tests/test_witnesses.py", "notebooks/results/<notebook>.full.results.json"):
        assert needed in text, needed
    for kind, module in (("findings", findings), ("records", records), ("witnesses", witnesses)):
        assert set(module.registered()) == set(NOTEBOOKS), f"{kind}: registered for {sorted(module.registered())}"
    for name, nb in NOTEBOOKS.items():
        assert (NOTEBOOK_DIR / f"{name}.yaml").is_file(), name
        assert (PACKAGE / "studies" / f"{nb.driver}.py").is_file() or (PACKAGE / "studies" / nb.driver).is_dir(), nb
        assert (PACKAGE / "studies" / "findings" / f"{nb.topic}.py").is_file(), nb
        assert set(nb.functions) == set(KINDS), f"{name}: registered {sorted(nb.functions)} of {KINDS}"
        assert name in witnesses.REQUIRED and name in witnesses.WITNESSED, name
