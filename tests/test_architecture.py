"""Layering of the xenbench package: a unit imports only from its own layer or lower ones.

Every ``import`` of a xenbench module is checked, at module level or inside a function (lazy imports
are still dependencies), including ``if TYPE_CHECKING:`` blocks. Layers, lowest first:

====  =============  ==========================================================================
 0    base           the package root, errors, _validation, _io, _ray, _device, _lazy, integrity, metrics, sampling,
                    provenance
 1    data           xenbench.data: datasets, wordnet, store
 2    models         xenbench.models: crossencoder, retrievers, scoring, packed, linking, train
 3    methods        xenbench.methods: cur, adacur (package), baselines, axn, mf, pefa, ccsa, trace, protocol
 4    studies        xenbench.studies: stats, rank, experiments, corpus, splits, findings, witnesses
 5    presentation   xenbench.viz: plots, widgets
 6    entry points   notebook, sweep, cli
====  =============  ==========================================================================

A subpackage is one unit: its modules share its layer and may import each other. ARCHITECTURE.md
explains the layers; a new top-level module or subpackage must be added to :data:`LAYERS`.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

import xenbench

PACKAGE = Path(xenbench.__file__).parent

LAYERS: list[tuple[str, set[str]]] = [
    ("base", {"xenbench", "errors", "_validation", "_io", "_ray", "_device", "_lazy", "integrity", "metrics",
              "sampling", "provenance"}),
    ("data", {"data"}),
    ("models", {"models"}),
    ("methods", {"methods"}),
    ("studies", {"studies"}),
    ("presentation", {"viz"}),
    ("entry points", {"notebook", "sweep", "cli"}),
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
           "def f():\n    from xenbench.studies.experiments import RoundTrace\n    from ..methods import cur\n"
           "    from . import rank\n")
    got = [target for _, target in imports_of(PACKAGE / "studies" / "stats.py", src)]
    assert got == ["xenbench", "xenbench.data", "xenbench.viz.plots._style", "xenbench.studies.experiments",
                   "xenbench.methods.cur", "xenbench.studies.rank"]


def test_architecture_md_lists_the_same_layers():
    text = (PACKAGE.parent / "ARCHITECTURE.md").read_text(encoding="utf-8")
    for name, units in LAYERS:
        assert name in text, name
        for unit in units - {"xenbench"}:
            assert f"`{unit}`" in text, unit


def test_names_moved_down_stay_importable_from_their_old_module():
    import xenbench._device as device
    import xenbench.studies.experiments as experiments
    import xenbench.methods.trace as trace

    assert experiments.RoundTrace is trace.RoundTrace
    assert experiments.trace_from_result is trace.trace_from_result
    assert experiments.search_device is device.search_device
    assert {"RoundTrace", "trace_from_result", "search_device"} <= set(experiments.__all__)
