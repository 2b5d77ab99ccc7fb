"""What a notebook calls inside its kernel: its parameters checked where they live, and plotly set up for reports.

Validation happens twice with the same rules and messages: :func:`xenbench.harness.runner.run_notebook` checks the
values before a kernel starts (:mod:`xenbench.harness.preflight`), and the notebook's first cell after the parameters
calls :func:`check_namespace` on its globals, so values edited in JupyterLab or passed to raw ``papermill`` get the
same clear error. A notebook's cells::

    import xenbench as xb
    xb.harness.setup_plotly()                                      # the imports cell
    ...                                                            # the parameters cell
    params = xb.harness.check_namespace(globals(), "00_data")      # the cell after it
    ...
    path = xb.harness.save_results("00_data", profile, {...})      # the last cell (xenbench.harness.results)
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from xenbench import provenance
from xenbench.errors import DataError
from xenbench.harness.params import validate_params
from xenbench.harness.preflight import ce_name, check_requires, check_store_name, refuse_checkpoint, replaced
from xenbench.harness.results import REPORTS_ENV, remember_params
from xenbench.harness.sizes import check_sizes
from xenbench.harness.spec import BASE_PROFILE, load_spec, profile_values

__all__ = ["check_namespace", "setup_plotly"]


def check_namespace(namespace: dict[str, Any], notebook: str | os.PathLike[str]) -> dict[str, Any]:
    """Apply the chosen profile and validate a notebook's parameters where they live: its globals.

    ``params = xb.harness.check_namespace(globals(), "00_data")`` in the first cell after the parameters cell
    gives whoever edits a value in JupyterLab, or runs raw papermill, the same error as
    :func:`~xenbench.harness.runner.run_notebook`.

    In JupyterLab (or raw papermill), when ``profile`` is not ``quick``, every parameter still at the
    parameters cell's (quick) value takes the profile's value, in ``namespace`` too; a parameter set
    to anything else is the user's override and stays. (So under another profile a value can be pinned
    to its quick value only with ``xenbench run -p``.) Under ``run_notebook`` the values are
    already resolved and injected, and are only validated.

    Parameters left None that the profiles file sizes from the data (its ``sized_by``, e.g. notebook 02's grids) get
    their sized values, in ``namespace`` too (:func:`~xenbench.harness.sizes.sized_values`).

    With a non-empty ``model`` (a CE folder; a ``.ckpt`` file is refused), the parameters it replaces
    (``replaced_by: model`` in the profiles file: the store ``scores_dir``/``ce``) are not checked and not returned as
    if used; the store parameter (``ce``) becomes the model's name (:func:`~xenbench.harness.preflight.ce_name`), in
    ``namespace`` too, so figures and findings name the user's CE by its folder. Without one, a parameter that
    ``requires: model`` must be null (:func:`~xenbench.harness.preflight.check_requires`).

    Parameters
    ----------
    namespace
        The notebook's ``globals()`` (updated with the resolved values).
    notebook
        The notebook's name; its profiles file is looked up in the working directory, then in
        :data:`~xenbench.harness.spec.NOTEBOOKS_DIR`.

    Returns
    -------
    dict
        ``profile`` and every declared parameter that is used -> its (validated) value.

    Raises
    ------
    ParameterError
        On a bad value or an unknown profile.
    DataError
        If a declared parameter is not defined at all (the parameters cell and the profiles file
        disagree).
    """
    spec = load_spec(notebook)
    provenance.clear_caveats()  # a run's caveats are its own (a notebook re-run in JupyterLab starts clean)
    missing = sorted(name for name in spec.params if name not in namespace)
    if missing:
        raise DataError(spec.path, f"declares {missing} but the notebook's parameters cell does not define them")
    values = {name: namespace[name] for name in spec.params}
    values["profile"] = namespace.get("profile", BASE_PROFILE)
    # With a model, its on-demand scores replace the store scores_dir/ce: those are neither checked nor shown.
    overridden = [n for n, p in spec.params.items() if replaced(p, values)]
    values = {**values, **validate_params(spec, {k: v for k, v in values.items() if k not in overridden})}
    check_requires(spec, values)
    for p in spec.params.values():
        if p.type == "model" and values[p.name]:
            refuse_checkpoint(values[p.name], p.name, spec.owner)
    profile = values["profile"]
    chosen = profile_values(spec, profile)
    if os.environ.get(REPORTS_ENV) is None and profile != BASE_PROFILE:
        cell = spec.profiles[BASE_PROFILE]
        values = {**values, **{name: chosen[name] for name in spec.params
                               if name not in overridden and values[name] == cell[name]}}
        namespace.update(values)
    filled: dict[str, Any] = {}
    check_sizes(spec, values, _filled=filled)
    sized = {k: v for k, v in filled.items() if k in spec.params and values.get(k) is None and v is not None}
    if sized:  # parameters left None, sized from the data (the profiles file's sized_by): the cells use these
        values = {**values, **sized}
        namespace.update(sized)
    stores = [p for p in spec.params.values() if p.type == "store"]
    for p in stores:
        if p.name not in overridden:
            check_store_name(values[p.within], values[p.name], spec.owner, param=p.name, folder_param=p.within)
    if overridden:
        values = {k: v for k, v in values.items() if k not in overridden}
        for p in stores:  # figures, set-up lines and findings name the user's CE by its folder
            if p.name in overridden:
                namespace[p.name] = values[p.name] = ce_name(values[p.replaced_by])
    _show_header(values)
    return values


def setup_plotly() -> None:
    """Make plotly figures survive headless execution and HTML export.

    The ``plotly_mimetype+notebook`` renderer emits both the JupyterLab mimetype and an HTML
    rendering; activating it also embeds plotly.js once in the cell's output, so the nbconvert
    HTML report shows every figure offline. Call it once, in the imports cell.

    Under :func:`~xenbench.harness.runner.run_notebook` (``$XENBENCH_REPORTS`` set) it also makes ``tqdm.auto``
    progress bars text bars: they reach the terminal of ``xenbench run`` as they move (a widget bar sends no text) and
    the saved report keeps their finished state.
    """
    import plotly.io as pio

    pio.renderers.default = "plotly_mimetype+notebook"
    if os.environ.get(REPORTS_ENV):
        import tqdm.auto
        import tqdm.std

        tqdm.auto.tqdm, tqdm.auto.trange = tqdm.std.tqdm, tqdm.std.trange


def _show_header(values: Mapping[str, Any]) -> None:
    """Remember the resolved parameters for :func:`~xenbench.harness.results.save_results` and, in a kernel, show where
    the run comes from (commit, versions, machine; :func:`xenbench.provenance.summary`) as the report's first output,
    then the data and CE it uses (:func:`xenbench.studies.findings.about.run_markdown`)."""
    remember_params(values)
    try:
        from IPython import get_ipython
    except ImportError:
        return
    if get_ipython() is None:
        return
    from xenbench._markup import show_markdown

    from xenbench.studies.findings.about import run_markdown

    prov = {"git": provenance.run_git_state(), **provenance.environment()}  # inputs come later: the results file
    show_markdown("**Provenance.** " + provenance.summary(prov).replace("\n", "  \n"))
    about = run_markdown(values)  # the data and CE this run uses, named from its parameters (the intros are general)
    if about:
        show_markdown(about)
