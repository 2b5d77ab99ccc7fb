"""A notebook's key numbers, saved by its last cell with what produced them (:func:`save_results`).

Under :func:`xenbench.harness.runner.run_notebook` the file lands in the run's output folder as
``<name>.<profile>.results.json``; a notebook run by hand in JupyterLab writes ``<name>.<profile>.lab.results.json``,
never the file of a ``xenbench run``.
"""
from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from xenbench import provenance
from xenbench._io import REPO_ROOT, write_text_atomic
from xenbench.errors import ParameterError
from xenbench.harness.params import PROFILE_NAME

__all__ = ["REPORTS_ENV", "RUN_STEM_ENV", "reports_dir", "runs_dir", "save_results", "remember_params"]

#: Environment variable naming the folder :func:`save_results` writes to.
#: :func:`~xenbench.harness.runner.run_notebook` sets it for the kernel it starts (a kernel inherits its parent's
#: environment).
REPORTS_ENV = "XENBENCH_REPORTS"
#: Environment variable holding the stem of a run's outputs (:func:`xenbench.harness.runner.run_stem`), set by
#: :func:`~xenbench.harness.runner.run_notebook` for its kernel: :func:`runs_dir` names the ranked lists' folder by it.
RUN_STEM_ENV = "XENBENCH_RUN_STEM"
_IMPORTED = time.monotonic()  # a notebook imports the harness in its first cell: the kernel's work starts here
# The parameters check_namespace resolved in this kernel: the ``params`` of the provenance save_results records.
_RUN_PARAMS: dict[str, Any] | None = None


def remember_params(values: Mapping[str, Any]) -> None:
    """Keep a run's resolved parameters (:func:`xenbench.harness.kernel.check_namespace` calls it) for the provenance
    of :func:`save_results`."""
    global _RUN_PARAMS
    _RUN_PARAMS = dict(values)


def reports_dir() -> Path:
    """Where :func:`save_results` writes: ``$XENBENCH_REPORTS`` (set by
    :func:`~xenbench.harness.runner.run_notebook`), else ``<repo>/reports``."""
    env = os.environ.get(REPORTS_ENV)
    return Path(env) if env else REPO_ROOT / "reports"


def _run_stem(name: str, profile: str) -> str:
    """The stem of a run's outputs: under run_notebook its ``$XENBENCH_RUN_STEM`` (``<name>.<profile>`` and the tags of
    the data and CE), so the results file is named as the report it belongs to; else ``<name>.<profile>.lab``."""
    if not os.environ.get(REPORTS_ENV):
        # Outside run_notebook (a kernel in JupyterLab) the file gets its own name, so an interactive session never
        # overwrites the results of a `xenbench run`.
        return f"{name}.{profile}.lab"
    stem = os.environ.get(RUN_STEM_ENV) or ""
    base = f"{name}.{profile}"
    return stem if stem == base or stem.startswith(base + ".") else base  # another notebook's stem is not this one's


def _results_name(name: str, profile: str) -> str:
    return f"{_run_stem(name, profile)}.results.json"


def runs_dir(name: str, profile: str, *, out_dir: Path | None = None) -> Path:
    """The folder of a run's ranked lists (TREC run files, :func:`xenbench.studies.labels.export_runs`): beside its
    results file and named like it, ``<out_dir>/<stem>.runs`` (``<name>.<profile>.runs``, with the dataset's tag when
    :func:`~xenbench.harness.runner.run_notebook` gives the run another stem; ``.lab.runs`` in JupyterLab)."""
    stem = _run_stem(name, profile)
    return (Path(out_dir) if out_dir is not None else reports_dir()) / f"{stem}.runs"


def _jsonable(obj: Any) -> Any:
    # numpy and pandas scalars/arrays without importing them here
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if hasattr(obj, "to_dict"):
        return obj.to_dict(orient="records") if hasattr(obj, "columns") else obj.to_dict()
    if isinstance(obj, (set, frozenset)):
        return sorted(obj)
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    raise TypeError(f"cannot store a {type(obj).__name__} in results JSON: {obj!r}")


def _resources() -> dict[str, float]:
    import resource
    import sys

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    peak_mb = peak / 2**20 if sys.platform == "darwin" else peak / 2**10
    return {"seconds": round(time.monotonic() - _IMPORTED, 1), "peak_rss_mb": round(peak_mb, 1)}


def save_results(name: str, profile: str, results: Mapping[str, Any], *, out_dir: Path | None = None,
                 params: Mapping[str, Any] | None = None) -> Path:
    """Write a notebook's key numbers to ``<out_dir>/<stem>.results.json`` (atomically): the stem of the run's report
    under :func:`~xenbench.harness.runner.run_notebook` (``<name>.<profile>`` plus its data and CE tags), so the
    findings that cite the file cite the report's own.

    Parameters
    ----------
    name
        The notebook's name, e.g. ``"00_data"``.
    profile
        The profile it ran under (its ``profile`` parameter).
    results
        JSON-able mapping; numpy scalars/arrays and pandas objects are converted.
    out_dir
        Default :func:`reports_dir`.
    params
        The run's resolved parameters for its provenance; default: those
        :func:`~xenbench.harness.kernel.check_namespace` resolved in this process.

    Returns
    -------
    Path
        The file written, ``<stem>.results.json`` (``<name>.<profile>.lab.results.json`` outside
        :func:`~xenbench.harness.runner.run_notebook`), holding ``{"notebook", "profile", "written_at", "resources",
        "provenance", "caveats", "results"}``; ``resources`` is this process's (the kernel's) ``seconds`` since the harness was
        imported (the notebook's first cell) and
        ``peak_rss_mb``, its peak resident memory: what a run on a larger corpus cost. ``provenance``
        (:func:`xenbench.provenance.collect`) says what produced the numbers: commit and dirty flag, parameters,
        package versions, machine, the SHA-256 of every store, dataset and model the process read, and the
        results' digest bound to the commit (``results_sha256``, :func:`xenbench.provenance.results_digest`). ``caveats``
        (:func:`xenbench.provenance.record_caveat`) says why the findings may not be trusted, e.g. a CE that does
        not read the query (:func:`xenbench.models.ce_check.warn_if_untrained`); empty when nothing was found.
    """
    if not isinstance(name, str) or not name or "/" in name or name.startswith("."):
        raise ParameterError("name", "a notebook name such as '00_data'", name, "save_results")
    if not isinstance(profile, str) or not PROFILE_NAME.fullmatch(profile):
        raise ParameterError("profile", "a profile name of letters, digits, '_' or '-'", profile, "save_results")
    if not isinstance(results, Mapping):
        raise ParameterError("results", "a mapping of names to JSON-able values", results, "save_results")
    folder = Path(out_dir) if out_dir is not None else reports_dir()
    folder.mkdir(parents=True, exist_ok=True)
    prov = provenance.collect(params if params is not None else _RUN_PARAMS)  # first: hashing is part of the cost
    doc = {
        "notebook": name,
        "profile": profile,
        "written_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "resources": _resources(),
        "provenance": prov,
        "caveats": provenance.recorded_caveats(),  # why its findings may not be trusted (e.g. a collapsed CE)
        "results": dict(results),
    }
    # the digest binds the tables as the file holds them (read back from JSON) to the commit: provenance.results_digest
    doc = provenance.bind_results(json.loads(json.dumps(doc, default=_jsonable, allow_nan=True)))
    text = json.dumps(doc, indent=2, allow_nan=True) + "\n"
    path = folder / _results_name(name, profile)
    write_text_atomic(path, text)
    return path
