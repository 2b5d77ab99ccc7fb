"""Run a notebook headless under a profile with papermill, into a report that replaces the previous one only on success.

Outputs of ``run_notebook("00_data", profile="quick")`` in ``out_dir``: ``00_data.quick.ipynb`` (executed),
``00_data.quick.html`` (a self-contained offline report: it draws its figures wherever it is copied; see
:mod:`xenbench.harness.report`) and, written by the notebook's last cell, ``00_data.quick.results.json``
(:func:`xenbench.harness.results.save_results`). A run writes into a hidden staging folder and replaces the previous
report only when it has succeeded: a failed or killed run leaves the previous good report in place (a failed one adds
``00_data.quick.failed.ipynb``). A second run of the same notebook, profile and data while one is running is refused
(the lock ``.00_data.quick.ipynb.lock``). A run replaces only what xenbench wrote for the same parameters: the executed
notebook records their digest, and ``<stem>.runs/`` a manifest of the files written there (a user's file there stays);
anything else is refused before the run (:func:`_refuse_foreign_outputs`).
"""
from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import json
import logging
import os
import re
import shutil
import time
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from xenbench._io import pid_alive, write_text_atomic
from xenbench._validation import PY_INT, check_int
from xenbench.errors import DataError, ParameterError
from xenbench.harness.params import validate_params
from xenbench.harness.preflight import preflight, unused_params
from xenbench.harness.report import (final_progress, light_html, summarize_warnings, summary_first, warning_key,
                                     without_plotly_bundle, without_widget_state)
from xenbench.harness.results import REPORTS_ENV, RUN_STEM_ENV
from xenbench.harness.spec import BASE_PROFILE, NotebookSpec, as_spec, load_spec, notebook_path, profile_values

__all__ = ["IDENTITY_PARAMS", "run_notebook", "run_stem"]

log = logging.getLogger(__name__)

#: Run by the kernel as it starts (IPython's ``exec_lines``). A kernel that has run a notebook spent longer in the
#: interpreter's final garbage collections than jupyter_client's 2.5 s grace after its shutdown request, so every run
#: ended with that wait and a SIGTERM (measured on 00_data: 2.5-3.2 s from the last cell to the kernel's end; 0.4 s with
#: this). Every exit handler still runs (those a cell registers run before the freeze); only the interpreter's final
#: collections skip the heap the notebook leaves behind.
#:
#: The second line keeps jsonschema from importing ``rfc3987_syntax`` in the kernel too (see ``_run_locked``): plotly's
#: renderers import nbformat, hence jsonschema, which builds that package's Lark grammars at import for an "iri" string
#: format nothing here validates (1.1 of the 1.3 CPU-s that setting the renderer took in a fresh interpreter).
KERNEL_EXEC_LINES = ("import atexit, gc; atexit.register(gc.freeze)",
                     "import sys; sys.modules.setdefault('rfc3987_syntax', None)")


#: The name of :func:`run_notebook`'s papermill engine (:func:`_engine`).
ENGINE = "xenbench"


@functools.cache
def _engine() -> str:
    """Register, once per process, as :data:`ENGINE`, papermill's nbclient engine that writes the partly executed
    notebook only when a run stops outside a cell's error (Ctrl-C, a cell timeout, a dead kernel), to the engine
    argument ``partial``.

    papermill otherwise writes the whole notebook as each cell starts and as it ends
    (``request_save_on_cell_execute``, off here): once a figure has put plotly.js (4.7 MB) into it, that is 57 ms a time
    while the kernel waits, 2.6 of the 6.2 CPU-s of this process in a quick run of 03. Those copies sit in the staging
    folder, which nothing reads during the run and a killed run's successor deletes; papermill still writes the
    notebook when a cell fails and when the run ends.
    """
    from papermill.engines import NBClientEngine, papermill_engines

    class PartialOnStop(NBClientEngine):
        @classmethod
        def execute_managed_notebook(cls, nb_man: Any, kernel_name: str, partial: Path | None = None,
                                     **kwargs: Any) -> Any:
            try:
                return super().execute_managed_notebook(nb_man, kernel_name, **kwargs)
            except BaseException:
                if partial is not None:
                    import nbformat

                    nbformat.write(nb_man.nb, partial)
                raise

    papermill_engines.register(ENGINE, PartialOnStop)
    return ENGINE


@contextlib.contextmanager
def _environ(**values: str) -> Iterator[None]:
    """Set environment variables for the duration (a kernel started meanwhile inherits them)."""
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, old in saved.items():
            if old is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = old


#: Parameters that say *what* a notebook ran on; a run that changes one gets its own report names.
IDENTITY_PARAMS = ("dataset", "datasets", "ce", "ces", "model", "scores_dir", "eval_datasets", "first_stage",
                   "first_stages")


def _slug(value: Any) -> str:
    """A parameter's value as a file-name tag: ``"beir:/data/scifact"`` -> ``"beir-scifact"``, ``"../models/cls-ce"``
    -> ``"cls-ce"``; a folder already named after its scheme is not prefixed twice (``"beir:/tmp/beir-adverbs"`` ->
    ``"beir-adverbs"``, ``"zeshel:/data/zeshel:yugioh"`` -> ``"zeshel-yugioh"``)."""
    parts = value if isinstance(value, (list, tuple)) else [value]
    words = []
    for v in parts:
        kind, _, rest = str(v).partition(":") if ":" in str(v) else ("", "", str(v))
        base = re.sub(r"[^A-Za-z0-9._-]+", "-", Path(rest.rstrip("/")).name or rest).strip("-.")
        words.append(base if not kind or base == kind or base.startswith(kind + "-") else f"{kind}-{base}")
    return re.sub(r"[^A-Za-z0-9._-]+", "-", "+".join(words)).strip("-.")[:80] or "x"


#: Hex digits of the parameter digest in a report's name (``p`` + 16 hex = 64 bits of SHA-256): two parameter sets
#: among a million in one folder share a name with probability about 3e-8 (24 bits gave ≈3 % among 1,000), and a
#: shared name is still refused, not overwritten (:func:`_refuse_foreign_outputs`).
DIGEST_HEX = 16
#: The manifest xenbench keeps in ``<stem>.runs/``: the parameters that name the run and the files it wrote there,
#: the only ones a later run of the same parameters replaces.
RUNS_MANIFEST = ".xenbench-written.json"


def _name_values(spec: NotebookSpec, profile: str, values: Mapping[str, Any]) -> dict[str, Any]:
    """Every parameter value that differs from the profile's (data and CE included): what names a run."""
    base = profile_values(spec, profile)
    return {k: values[k] for k in sorted(spec.params) if k in values and values[k] != base[k]}


def _digest(named: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(named, sort_keys=True, default=str).encode("utf-8")).hexdigest()


def run_stem(spec: NotebookSpec | str, profile: str, values: Mapping[str, Any]) -> str:
    """File stem of a run's outputs: ``<name>.<profile>``, then what differs from the profile: the data and CE
    (:data:`IDENTITY_PARAMS`, each tag once, for the reader) and, when any value differs, ``p`` + 16 hex digits
    (:data:`DIGEST_HEX`) of a SHA-256 of every differing value, data and CE included (e.g.
    ``03_adacur_rounds.quick.beir-mine.my-ce.p3f9a1c0d2e4b6a88``). So a run on other data, with another CE or with
    other sizes never overwrites another's report; the same run again replaces its own."""
    spec = as_spec(spec)
    named = _name_values(spec, profile, values)
    tags: list[str] = []
    for k in IDENTITY_PARAMS:
        if k in named and _slug(named[k]) not in tags:
            tags.append(_slug(named[k]))
    if named:
        tags.append(f"p{_digest(named)[:DIGEST_HEX]}")
    return ".".join([spec.name, profile, *tags])


def _read_json_object(path: Path, limit: int = 256 * 2**20) -> dict[str, Any] | None:
    """A JSON object read from a regular file of at most ``limit`` bytes, else None (not ours to judge further)."""
    try:
        if not path.is_file() or path.stat().st_size > limit:
            return None
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    return doc if isinstance(doc, dict) else None


def _written_key(nb_path: Path) -> str | None:
    """The parameter digest an executed notebook of xenbench records (``metadata.xenbench.params_sha256``), or
    ``"legacy"`` for a papermill-executed notebook of an older xenbench, else None (not written by xenbench)."""
    doc = _read_json_object(nb_path)
    meta = (doc or {}).get("metadata")
    if not isinstance(meta, dict):
        return None
    mine = meta.get("xenbench")
    if isinstance(mine, dict) and isinstance(mine.get("params_sha256"), str):
        return mine["params_sha256"]
    return "legacy" if isinstance(meta.get("papermill"), dict) else None


def _refuse_foreign_outputs(out: Path, spec: NotebookSpec, stem: str, key: str) -> None:
    """Refuse, before any work, a run whose outputs would replace what xenbench did not write for these parameters.

    ``<stem>.ipynb`` must be an executed notebook of xenbench recording the same parameter digest (one of an older
    xenbench, which recorded none, is taken as the run of its name); ``<stem>.html`` or ``<stem>.results.json``
    without that notebook is not replaced; ``<stem>.runs`` must be a folder (a file or a link there is never deleted),
    and one holding files must have xenbench's manifest for the same parameters (its other files, a user's, stay).

    Raises
    ------
    DataError
        Naming the file and why; nothing was written or deleted.
    """
    notebook = out / f"{stem}.ipynb"
    again = "choose another --out, or move it away and run again (nothing was changed)"
    if notebook.exists() or notebook.is_symlink():
        written = _written_key(notebook) if not notebook.is_symlink() else None
        if written is None:
            raise DataError(notebook, f"is not an executed notebook xenbench wrote, so this run of {spec.name} does "
                                      f"not replace it: {again}")
        if written not in (key, "legacy"):
            raise DataError(notebook, f"was written by xenbench for other parameters under the same name: {again}")
    else:
        for other in (out / f"{stem}.html", out / f"{stem}.results.json"):
            if other.exists() or other.is_symlink():
                raise DataError(other, f"exists without the notebook {notebook.name} of its run, so xenbench did not "
                                       f"write it with these parameters and does not replace it: {again}")
    runs = out / f"{stem}.runs"
    if runs.is_symlink() or (runs.exists() and not runs.is_dir()):
        raise DataError(runs, f"is not a folder (a file or a link): xenbench writes this run's ranked lists into a "
                              f"folder of that name and never deletes a file of yours: {again}")
    if runs.is_dir() and any(runs.iterdir()):
        manifest = _read_json_object(runs / RUNS_MANIFEST)
        if manifest is None or not isinstance(manifest.get("files"), list):
            raise DataError(runs, f"holds files but no manifest of what xenbench wrote there ({RUNS_MANIFEST}): "
                                  f"written by you or an older xenbench; {again}")
        if manifest.get("params_sha256") != key:
            raise DataError(runs, f"was written by xenbench for other parameters under the same name: {again}")


def _merge_runs(staged: Path, dest: Path, key: str) -> None:
    """Put the files of a run's staged ``.runs`` folder into ``dest``: the files the previous run of these parameters
    wrote (its manifest) are replaced or removed, any other file (a user's) stays; a new manifest lists this run's.

    Raises
    ------
    DataError
        A file of this run would replace a file xenbench did not write there (nothing is moved).
    """
    new = sorted(p.relative_to(staged).as_posix() for p in staged.rglob("*") if p.is_file() or p.is_symlink())
    old_manifest = _read_json_object(dest / RUNS_MANIFEST) if dest.is_dir() else None
    ours = {str(f) for f in (old_manifest or {}).get("files", []) if isinstance(f, str)}
    if dest.is_dir():
        for name in new:
            target = dest / name
            if (target.exists() or target.is_symlink()) and name not in ours:
                raise DataError(target, "was not written by xenbench (not in the folder's manifest) and this run "
                                        "writes a file of that name: move it away and run again (your file is kept; "
                                        "this run's report was not saved)")
    dest.mkdir(exist_ok=True)
    for name in sorted(ours - set(new)):  # a file of the previous run this one did not write again
        if ".." not in Path(name).parts:
            (dest / name).unlink(missing_ok=True)
    for name in new:
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        os.replace(staged / name, dest / name)
    write_text_atomic(dest / RUNS_MANIFEST, json.dumps({"params_sha256": key, "files": new}, indent=1) + "\n")


def _out_folder(out_dir: str | os.PathLike[str], *, create: bool) -> Path:
    """``out_dir`` resolved (and created with ``create``); a symbolic link loop or a dangling link on its way, or a
    folder that cannot be made, is one line."""
    given = Path(out_dir)
    for p in reversed((given, *given.parents)):
        if p.is_symlink() and not p.exists():
            try:
                os.stat(p)
            except OSError as err:
                why = ("a symbolic link loop" if err.errno == errno.ELOOP
                       else f"a dangling symbolic link (to {os.readlink(p)})")
                raise DataError(p, f"is {why}: --out expects a folder that exists or can be created") from None
    try:
        out = given.resolve()
        if create:
            out.mkdir(parents=True, exist_ok=True)
    except (OSError, RuntimeError) as err:  # RuntimeError: pathlib's "Symlink loop" before Python 3.13
        why = getattr(err, "strerror", None) or str(err)
        raise DataError(given, f"cannot be used as the output folder ({why}): --out expects a folder that exists or "
                               "can be created") from None
    return out


class _Echo:
    """The kernel's stdout or stderr, passed to this process's as the cells write it (papermill's ``stdout_file``/
    ``stderr_file``): progress bars and log lines as they come, each library warning once (then counted, and the
    count written at the end)."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.counts: dict[str, int] = {}

    def write(self, text: str) -> None:
        kept = []
        for line in text.splitlines(keepends=True):
            key = warning_key(line)
            if key is not None:
                self.counts[key] = self.counts.get(key, 0) + 1
                if self.counts[key] > 1:
                    continue
            kept.append(line)
        self.stream.write("".join(kept))

    def flush(self) -> None:
        self.stream.flush()

    def summary(self) -> None:
        for key, n in self.counts.items():
            if n > 1:
                self.stream.write(f"({n - 1} more warnings like: {key})\n")
        self.stream.flush()



def _mark_unused(nb: Any, unused: tuple[str, ...], why: str) -> None:
    """Append to papermill's injected-parameters cell of ``nb`` (in place) a comment naming the parameters the run
    did not inject because it does not use them (:func:`~xenbench.harness.preflight.unused_params`), so a reader of
    the report does not take the parameters cell's values of those for the run's."""
    if not unused:
        return
    for cell in nb.cells:
        if "injected-parameters" in cell.get("metadata", {}).get("tags", []):
            cell.source = cell.source.rstrip("\n") + f"\n# Not used by this run ({why}): {', '.join(unused)}\n"
            return


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def run_notebook(
    notebook: str | os.PathLike[str],
    *,
    profile: str = BASE_PROFILE,
    params: Mapping[str, Any] | None = None,
    out_dir: str | os.PathLike[str] = Path("reports"),
    timeout: int = 1200,
    kernel: str = "python3",
    html: bool = True,
    self_contained: bool = True,
    progress_bar: bool | None = None,
    log_output: bool = False,
    fit: bool = False,
) -> Path:
    """Execute a notebook under a profile with papermill and export its HTML report.

    Parameters
    ----------
    notebook
        A name in ``notebooks/`` (``"00_data"``) or the path of an ``.ipynb`` file; its profiles file
        is the ``.yaml`` beside it.
    profile
        A profile of the profiles file (``quick``, ``full``, ...); its values update ``quick``'s.
    params
        Values overriding the profile's, e.g. ``{"max_queries": 50}``.
    out_dir
        Folder of the outputs (created).
    timeout
        Seconds each cell may run.
    kernel
        Jupyter kernel name.
    html
        Also export ``<name>.<profile>.html``: offline, no CDN (MathJax and require.js are dropped: no report
        uses them), no saved widget state, progress bars in their finished state, each library warning once
        (:func:`~xenbench.harness.report.summarize_warnings`).
    self_contained
        plotly.js inside each HTML report (default: a report copied alone still draws its figures); False shares one
        ``plotly-<version>.min.js`` beside the reports (about 4.6 MB less each; see
        :func:`~xenbench.harness.report.light_html`).
    progress_bar
        Show the run's progress in this terminal: papermill's bar over the cells and the kernel's stderr as it
        comes (its progress bars, e.g. the pairs, rate and time left of on-demand scoring, its log lines, each
        library warning once). Default on, except under CI (``$CI`` set).
    log_output
        Also echo the kernel's stdout (what the cells print) to this process's stdout.
    fit
        With ``model`` (03, 04, 07): choose ``max_queries`` and ``max_items`` so that the on-demand scoring fits the
        cell timeout at the rate measured here (:func:`~xenbench.harness.preflight.fit_sizes`), instead of refusing.

    Returns
    -------
    Path
        ``out_dir/<stem>.ipynb``, the executed notebook; ``<stem>`` is ``<name>.<profile>``, plus the
        dataset/model when they differ from the profile's (:func:`run_stem`).

    Raises
    ------
    ParameterError
        Unknown notebook, profile or parameter, a bad value, or anything
        :func:`~xenbench.harness.preflight.preflight` finds (a device this machine lacks, a missing folder, a size
        relation the data breaks, a ``.ckpt`` as ``model``, on-demand scoring past ``timeout``) -- before any kernel
        starts, and nothing is written.
    DataError
        Missing or malformed profiles file or dataset; or another run of the same notebook, profile and data is
        writing into ``out_dir`` (its lock ``.<stem>.ipynb.lock``).
    papermill.PapermillExecutionError
        A cell failed; the partly executed notebook is kept as ``<name>.<profile>.failed.ipynb``.

    Notes
    -----
    The kernel runs in the notebook's folder (relative paths behave as in JupyterLab) with ``$XENBENCH_REPORTS`` set
    to ``out_dir``, where the notebook's :func:`~xenbench.harness.results.save_results` writes, and Hugging Face
    progress bars off unless ``$HF_HUB_DISABLE_PROGRESS_BARS`` says otherwise. (The kernel inherits this process's
    environment, which is set for the duration of the run: do not call ``run_notebook`` from several threads at once.)
    A ``model``'s fingerprint, computed by the preflight, is recorded in the cache folder
    (:mod:`xenbench.models.fingerprint`): the kernel finds its cached scores without loading the CE.
    The notebook runs in a hidden staging folder inside ``out_dir`` (its results JSON and HTML too); only
    when everything has succeeded are the executed notebook, the HTML and the results JSON renamed over the
    previous run's, so a failed or killed run never destroys a good report and the folder never mixes two
    runs. A failure adds ``<name>.<profile>.failed.ipynb`` beside the previous report; a later success
    removes it.
    """
    path = notebook_path(notebook)
    spec = load_spec(path)
    if not isinstance(kernel, str) or not kernel:
        raise ParameterError("kernel", "a Jupyter kernel name such as 'python3'", kernel, "run_notebook")
    check_int(timeout, "timeout", 1, None, "run_notebook", types=PY_INT, expected="an int >= 1 (seconds per cell)")
    if params is not None and "profile" in params:
        raise ParameterError("params", "values of the notebook's parameters; choose the profile with profile=",
                             dict(params), "run_notebook")
    values = {**profile_values(spec, profile), **validate_params(spec, dict(params or {}))}
    values["profile"] = profile
    # Where the outputs go and whether they may be replaced: checked before the preflight (which may load a CE).
    out = _out_folder(out_dir, create=False)
    stem = run_stem(spec, profile, values)
    key = _digest(_name_values(spec, profile, values))
    _refuse_foreign_outputs(out, spec, stem, key)
    preflight(spec, values, timeout=timeout, fit=fit)
    if fit:  # the sizes it chose name the report
        stem, key = run_stem(spec, profile, values), _digest(_name_values(spec, profile, values))
        _refuse_foreign_outputs(out, spec, stem, key)
    out = _out_folder(out_dir, create=True)  # nothing is written before the checks have passed
    from xenbench.data.store import writer_lock

    # One run per report at a time: a second `xenbench run` of the same notebook, profile and data is refused.
    with writer_lock(out / f"{stem}.ipynb"):
        _refuse_foreign_outputs(out, spec, stem, key)  # again under the lock: another run may have finished meanwhile
        return _run_locked(path, spec, profile, values, out, stem, key, timeout=timeout, kernel=kernel, html=html,
                           self_contained=self_contained, progress_bar=progress_bar, log_output=log_output)


def _run_locked(path: Path, spec: NotebookSpec, profile: str, values: dict[str, Any], out: Path, stem: str, key: str, *,
                timeout: int, kernel: str, html: bool, self_contained: bool, progress_bar: bool | None,
                log_output: bool) -> Path:
    import sys

    # jsonschema (under nbformat) imports rfc3987_syntax when it is installed (jupyter-events' extra), which builds a
    # Lark grammar at import: ~3.5 s of every run on 2 cores, for an "iri" string format that no notebook schema uses.
    sys.modules.setdefault("rfc3987_syntax", None)  # type: ignore[arg-type]  (None: "import rfc3987_syntax" fails)
    import nbformat
    import papermill as pm

    final, failed = out / f"{stem}.ipynb", out / f"{stem}.failed.ipynb"
    report, results = out / f"{stem}.html", out / f"{stem}.results.json"
    for old in out.glob(f".{stem}.*.staging"):  # left by a killed run (its pid is gone)
        pid = old.name[len(stem) + 2 :].split(".", 1)[0]
        if not (pid.isdigit() and pid_alive(int(pid))):
            shutil.rmtree(old, ignore_errors=True)
    stage = out / f".{stem}.{os.getpid()}.{uuid.uuid4().hex[:12]}.staging"
    stage.mkdir()
    # The kernel's save_results names its file by the stem ($XENBENCH_RUN_STEM), as its findings cite it.
    staged = {final: stage / final.name, report: stage / report.name, results: stage / results.name,
              out / f"{stem}.runs": stage / f"{stem}.runs"}  # the ranked lists (xenbench.harness.results.runs_dir)
    if progress_bar is None:
        progress_bar = not _in_ci()

    log.info("running %s (profile %s)", path.name, profile)
    log.debug("parameters of %s: %s", path.name, values)
    # The injected cell holds only what this run uses (a model's run reads no store): the others keep the parameters
    # cell's values, which the kernel ignores, and the injected cell names them as unused (_mark_unused).
    unused, why = unused_params(spec, values)
    injected = {k: v for k, v in values.items() if k not in unused}
    echo_err = _Echo(sys.stderr) if progress_bar else None
    echo_out = _Echo(sys.stdout) if log_output else None
    start = time.perf_counter()
    try:
        # Progress bars of Hugging Face loaders only clutter a report (they are frozen widgets in HTML). The kernel's
        # own bars are text (setup_plotly), redrawn at most every 2 s: its stderr is echoed here and saved.
        quiet = os.environ.get("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        with _environ(**{REPORTS_ENV: str(stage), RUN_STEM_ENV: stem, "HF_HUB_DISABLE_PROGRESS_BARS": quiet,
                         "TQDM_MININTERVAL": os.environ.get("TQDM_MININTERVAL", "2")}):
            nb = pm.execute_notebook(
                path, staged[final], parameters=injected, kernel_name=kernel, cwd=path.parent,
                engine_name=_engine(), request_save_on_cell_execute=False, partial=staged[final],
                execution_timeout=timeout, progress_bar=progress_bar, log_output=False,
                stdout_file=echo_out, stderr_file=echo_err, coalesce_streams=True,
                # The kernel process's own log (start-up notices such as "running over TCP without encryption" on
                # 127.0.0.1, a closed-socket traceback when Ctrl-C stops a run mid-cell) is not the notebook's: a
                # cell's error comes back as its output, and a dead kernel as papermill's error.
                extra_arguments=["--IPKernelApp.log_level=CRITICAL",
                                 *(f"--IPKernelApp.exec_lines={line}" for line in KERNEL_EXEC_LINES)],
            )
        log.info("executed %s in %.1f s", path.name, time.perf_counter() - start)
        nb = without_widget_state(nb)
        _mark_unused(nb, unused, why)
        final_progress(nb)
        summarize_warnings(nb)
        # The .ipynb without plotly.js (JupyterLab draws from each figure's JSON); the HTML, made below from `nb`, keeps it.
        nb.setdefault("metadata", {})["xenbench"] = {"stem": stem, "params_sha256": key}  # what a rerun checks
        nbformat.write(nbformat.from_dict(without_plotly_bundle(nb)), staged[final])
        if html:
            from nbconvert import HTMLExporter

            body, _ = HTMLExporter().from_notebook_node(nbformat.from_dict(summary_first(nb)))
            write_text_atomic(staged[report], light_html(body, out, self_contained=self_contained))
    except BaseException as exc:
        if echo_err is not None:
            echo_err.summary()
        if staged[final].exists():
            os.replace(staged[final], failed)
            if hasattr(exc, "add_note"):
                exc.add_note(f"The partly executed notebook is kept in {failed}; the previous report is untouched")
        shutil.rmtree(stage, ignore_errors=True)
        if isinstance(exc, OSError) and exc.filename is None and exc.errno is not None:
            # a write on a full disk ("No space left on device") names no file: name the folder being written
            raise OSError(exc.errno, exc.strerror or str(exc), str(out)) from exc
        raise
    if echo_err is not None:
        echo_err.summary()
    # Success: every output is complete. The ranked lists first (the one step that can still refuse: a file of yours
    # in <stem>.runs with a name this run writes), then the rest of the previous run's set (a name this run lacks is
    # removed: _refuse_foreign_outputs checked that it is xenbench's, for these parameters).
    runs_dest = out / f"{stem}.runs"
    if staged[runs_dest].is_dir():
        _merge_runs(staged[runs_dest], runs_dest, key)
    elif runs_dest.is_dir():
        _merge_runs(stage / "no-runs", runs_dest, key)  # removes the previous run's files only
        if [p.name for p in runs_dest.iterdir()] == [RUNS_MANIFEST]:
            (runs_dest / RUNS_MANIFEST).unlink()
            runs_dest.rmdir()
    for dest, src in staged.items():
        if dest == runs_dest:
            continue
        if src.exists():
            os.replace(src, dest)
        else:
            dest.unlink(missing_ok=True)
    failed.unlink(missing_ok=True)
    shutil.rmtree(stage, ignore_errors=True)
    return final
