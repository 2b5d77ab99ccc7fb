"""Sweep a notebook over a parameter grid with papermill and collect every run into one tidy table.

``xenbench sweep 05_pefa_lambda -p lambdas 0.1 0.3 0.5 -p seed 0 1 --profile quick`` runs the notebook once per
grid point (the Cartesian product of the values), each into ``<out>/points/<point id>/`` with its executed
notebook, HTML report and results JSON. Then:

* ``<out>/results.parquet`` and ``<out>/results.csv``: one row per grid point and metric (columns: ``point``,
  the swept parameters, ``metric``, ``value``), flattened from each results JSON (:func:`tidy`);
* ``<out>/points.csv``: one row per point with its status (``ok`` / ``failed`` and the error), seconds;
* ``<out>/summary.html``: per swept parameter, the metrics that change across the grid against it.

A point that finished is skipped when the sweep is run again (resumable); a failed point is recorded with its
error and does not stop the others (it is retried on the next run). Points run one at a time, in ``jobs``
local processes, or as Ray tasks (``backend="ray"``; ``pip install xenbench[ray]``).
"""
from __future__ import annotations

import concurrent.futures
import hashlib
import itertools
import json
import logging
import math
import os
import time
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from xenbench._io import write_text_atomic
from xenbench._markup import escape
from xenbench._validation import PY_INT, check_choice, check_int
from xenbench.errors import ParameterError
from xenbench.harness import (load_spec, notebook_path, parse_cli_params, preflight, profile_values, run_notebook,
                              run_stem)

__all__ = ["MAX_POINTS", "grid", "point_id", "run_sweep", "tidy", "summary_figures"]

log = logging.getLogger(__name__)
_STATUS = "point.json"
#: The largest grid a sweep runs (a notebook point takes a minute or more): a larger product of values is refused
#: before any value is read, so a mistyped grid costs nothing.
MAX_POINTS = 1000


def grid(values: Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
    """The Cartesian product of each parameter's values, in the order given (last parameter fastest)."""
    names = list(values)
    return [dict(zip(names, combo)) for combo in itertools.product(*(list(values[n]) for n in names))]


def point_id(params: Mapping[str, Any]) -> str:
    """A short stable folder name for a grid point: readable values plus a hash of the exact values."""
    text = json.dumps(params, sort_keys=True, default=str)
    readable = "_".join(f"{k}={v if not isinstance(v, (list, tuple)) else ','.join(map(str, v))}"
                        for k, v in params.items())
    safe = "".join(c if c.isalnum() or c in "=,.-_" else "-" for c in readable)[:60]
    return f"{safe}-{hashlib.sha256(text.encode()).hexdigest()[:8]}"


def _flatten(obj: Any, prefix: str, out: dict[str, float]) -> None:
    if isinstance(obj, bool):
        out[prefix] = float(obj)
    elif isinstance(obj, (int, float)):
        if math.isfinite(float(obj)):
            out[prefix] = float(obj)
    elif isinstance(obj, Mapping):
        for key, value in obj.items():
            _flatten(value, f"{prefix}.{key}" if prefix else str(key), out)
    elif isinstance(obj, list) and obj and all(isinstance(r, Mapping) for r in obj):
        # A table saved as records: the non-float fields name the row, the float fields are its metrics.
        for record in obj:
            keys = [f"{k}={v}" for k, v in record.items()
                    if isinstance(v, (str, int)) and not isinstance(v, bool) and not _is_float_like(k)]
            label = f"{prefix}[{','.join(keys)}]"
            for k, v in record.items():
                if isinstance(v, float) or _is_float_like(k):
                    _flatten(v, f"{label}.{k}", out)


def _is_float_like(name: str) -> bool:
    # Integer-valued measurements (counts of postings, seconds rounded...) are metrics, not row names.
    return any(w in name for w in ("recall", "accuracy", "seconds", "imbalance", "scored", "gain", "mse", "error"))


def tidy(points: Sequence[tuple[str, Mapping[str, Any], Mapping[str, Any]]]) -> pd.DataFrame:
    """One row per (point, metric): ``point``, the swept parameters, ``metric``, ``value``.

    ``points`` holds ``(point id, swept values, results)`` with ``results`` the ``results`` mapping of a results
    JSON; its ``params`` entry (the run's parameters) is left out, every other numeric leaf becomes a metric.
    """
    rows = []
    for pid, params, results in points:
        flat: dict[str, float] = {}
        _flatten({k: v for k, v in results.items() if k != "params"}, "", flat)
        shown = {k: (json.dumps(v) if isinstance(v, (list, dict)) else v) for k, v in params.items()}
        rows += [{"point": pid, **shown, "metric": m, "value": v} for m, v in flat.items()]
    columns = ["point", *(points[0][1] if points else []), "metric", "value"]
    return pd.DataFrame(rows, columns=columns)


def summary_figures(table: pd.DataFrame, swept: Sequence[str], *, max_metrics: int = 12) -> list[Any]:
    """Per swept parameter, a figure of the metrics that vary across the grid (mean over the other parameters)."""
    import plotly.express as px

    from xenbench.viz.plots._style import _style

    figures = []
    if table.empty:
        return figures
    spread = table.groupby("metric")["value"].agg(lambda v: v.max() - v.min())
    varying = list(spread[spread > 0].sort_values(ascending=False).index[:max_metrics])
    for name in swept:
        d = table[table["metric"].isin(varying)].groupby([name, "metric"], as_index=False)["value"].mean()
        fig = px.line(d, x=name, y="value", color="metric", markers=True)
        figures.append(_style(fig, f"Metrics that change with {name} (mean over the other swept parameters)", 480))
    return figures


def _run_point(notebook: str, profile: str, params: dict[str, Any], folder: str, timeout: int) -> dict[str, Any]:
    """Run one grid point into ``folder`` and record its status there (also in a worker process)."""
    start = time.perf_counter()
    status: dict[str, Any] = {"params": params, "status": "ok", "error": None}
    try:
        run_notebook(notebook, profile=profile, params=params, out_dir=folder, timeout=timeout, progress_bar=False)
    except BaseException as exc:  # noqa: BLE001 - a failed point is data: record it, go on with the others
        if isinstance(exc, KeyboardInterrupt):
            raise
        status.update(status="failed", error=f"{type(exc).__name__}: {exc}".strip()[:2000],
                      traceback=traceback.format_exc()[-4000:])
    status["seconds"] = time.perf_counter() - start
    write_text_atomic(Path(folder) / _STATUS, json.dumps(status, indent=2, default=str) + "\n")
    return status


def run_sweep(notebook: str, values: Mapping[str, Sequence[str]], *, profile: str = "quick",
              out_dir: str | os.PathLike[str] | None = None, backend: str = "local", jobs: int = 1,
              address: str | None = None, timeout: int = 1200) -> pd.DataFrame:
    """Run ``notebook`` at every point of the grid of ``values`` and collect the results.

    Parameters
    ----------
    notebook
        A notebook name (``"05_pefa_lambda"``).
    values
        Parameter name -> the command-line texts of its values (parsed and validated like ``-p``), e.g.
        ``{"lambdas": ["0.1", "0.5"], "seed": ["0", "1"]}``. Every value is checked before anything runs.
    profile, timeout
        As in :func:`xenbench.harness.run_notebook`.
    out_dir
        Default ``reports/sweeps/<notebook>.<profile>``.
    backend, jobs, address
        ``"local"``: ``jobs`` worker processes (1: in this process). ``"ray"``: one Ray task per point on the
        cluster at ``address`` (None: a local Ray started here with ``jobs`` CPUs).

    Every point is checked as ``xenbench run`` checks a run (:func:`xenbench.harness.preflight`: datasets, devices,
    folders, size relations, on-demand scoring time) before any kernel starts or any file is written: one bad point
    fails the whole sweep with one line.

    Returns
    -------
    DataFrame
        The tidy table written to ``results.parquet`` / ``results.csv``.
    """
    owner = "run_sweep"
    spec = load_spec(notebook)
    if not values:
        raise ParameterError("values", "at least one swept parameter (-p NAME V1 V2 ...)", values, owner)
    check_choice(backend, "backend", ("local", "ray"), owner, expected="'local' or 'ray'")
    check_int(jobs, "jobs", 1, None, owner, types=PY_INT)
    texts_of = {name: list(texts) for name, texts in values.items()}
    for name, texts in texts_of.items():
        if not texts:
            raise ParameterError(name, "at least one value to sweep", texts, owner)
    n_points = math.prod(len(texts) for texts in texts_of.values())
    if n_points > MAX_POINTS:
        sizes = " x ".join(f"{len(t)} {name}" for name, t in texts_of.items())
        raise ParameterError("values", f"a grid of at most {MAX_POINTS:,} points (sweep.MAX_POINTS; split it into "
                                       f"several sweeps)", f"{sizes} = {n_points:,} points", owner)
    parsed: dict[str, list[Any]] = {}
    for name, texts in texts_of.items():
        parsed[name] = [parse_cli_params(spec, [(name, t)])[name] for t in texts]  # validates each value
    points = grid(parsed)
    check_int(timeout, "timeout", 1, None, owner, types=PY_INT)
    base = profile_values(spec, profile)
    for params in points:
        preflight(spec, {**base, **params, "profile": profile}, timeout=timeout)
    out = Path(out_dir) if out_dir is not None else Path("reports") / "sweeps" / f"{spec.name}.{profile}"
    (out / "points").mkdir(parents=True, exist_ok=True)

    todo, done = [], []
    for params in points:
        folder = out / "points" / point_id(params)
        status = _read_status(folder)
        if status and status.get("status") == "ok":
            done.append(params)  # resumable: a finished point is not run again
        else:
            todo.append((params, folder))
    log.info("sweep of %s: %d points, %d already done, %d to run (%s)", spec.name, len(points), len(done), len(todo),
             backend)
    _execute(str(notebook_path(notebook)), profile, todo, backend, jobs, address, timeout)

    docs, rows = [], []
    for params in points:
        folder = out / "points" / point_id(params)
        status = _read_status(folder) or {"status": "missing", "error": "no status written"}
        stem = run_stem(spec, profile, {**base, **params})
        rows.append({"point": point_id(params), **{k: json.dumps(v) if isinstance(v, list) else v
                                                     for k, v in params.items()},
                     "status": status.get("status"), "error": status.get("error"), "seconds": status.get("seconds")})
        results = folder / f"{stem}.results.json"
        if status.get("status") == "ok" and results.is_file():
            docs.append((point_id(params), params, json.loads(results.read_text(encoding="utf-8"))["results"]))
    table = tidy(docs)
    write_text_atomic(out / "points.csv", pd.DataFrame(rows).to_csv(index=False))
    write_text_atomic(out / "results.csv", table.to_csv(index=False))
    tmp = out / f".results.{os.getpid()}.parquet"
    table.to_parquet(tmp, index=False)
    os.replace(tmp, out / "results.parquet")
    _write_summary(out, spec.name, profile, table, list(values), pd.DataFrame(rows))
    return table


def _read_status(folder: Path) -> dict[str, Any] | None:
    try:
        return json.loads((folder / _STATUS).read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def _execute(notebook: str, profile: str, todo: list[tuple[dict[str, Any], Path]], backend: str, jobs: int,
             address: str | None, timeout: int) -> None:
    from tqdm.auto import tqdm

    bar = tqdm(total=len(todo), desc=f"sweep {Path(notebook).stem}", unit="point", disable=not todo)
    try:
        if backend == "ray":
            from xenbench._ray import ray_session

            with ray_session(address, jobs) as ray:
                task = ray.remote(num_cpus=1, max_retries=1)(_run_point)
                pending = [task.remote(notebook, profile, p, str(f), timeout) for p, f in todo]
                while pending:
                    ready, pending = ray.wait(pending)
                    ray.get(ready)
                    bar.update(len(ready))
        elif jobs == 1:
            for params, folder in todo:
                _run_point(notebook, profile, params, str(folder), timeout)
                bar.update()
        else:
            with concurrent.futures.ProcessPoolExecutor(max_workers=jobs) as pool:
                futures = [pool.submit(_run_point, notebook, profile, p, str(f), timeout) for p, f in todo]
                for fut in concurrent.futures.as_completed(futures):
                    fut.result()
                    bar.update()
    finally:
        bar.close()


def _write_summary(out: Path, notebook: str, profile: str, table: pd.DataFrame, swept: list[str],
                   points: pd.DataFrame) -> None:
    from xenbench.harness import light_html

    n_ok = int((points["status"] == "ok").sum())
    parts = [f"<h1>Sweep of {escape(notebook)} (profile {escape(profile)})</h1>",
             f"<p>{len(points)} grid points over {escape(', '.join(swept))}: {n_ok} finished, {len(points) - n_ok} failed. "
             "Tidy table: <code>results.parquet</code> / <code>results.csv</code> (one row per point and metric); "
             "each point's report is in <code>points/&lt;point&gt;/</code>.</p>",
             points.to_html(index=False, na_rep="")]
    first = True
    for fig in summary_figures(table, swept):
        parts.append(fig.to_html(full_html=False, include_plotlyjs=first))
        first = False
    body = "<!DOCTYPE html><html><head><meta charset='utf-8'><title>sweep</title></head><body>" + "\n".join(parts) + \
        "</body></html>"
    write_text_atomic(out / "summary.html", light_html(body, out))
