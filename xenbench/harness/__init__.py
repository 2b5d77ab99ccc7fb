"""The notebook harness: run the workbench's notebooks headless, with validated parameters, into reports.

One module per step of a run, in the order a run meets them:

==============  ====================================================================================================
``spec``        a notebook's profiles file (``notebooks/<name>.yaml``): parameters, profiles, data, size relations
``params``      values checked against it: one parameter's constraints, a mapping, ``-p name value`` text
``sizes``       the data's sizes found without a kernel, and the ``at_most``/``fits`` relations checked against them
``preflight``   everything checked before a kernel starts: devices, folders, stores, datasets, sizes, and the
                on-demand scoring of a user's CE planned (cached? how long?)
``kernel``      what a notebook calls in its kernel: ``check_namespace(globals(), name)``, ``setup_plotly()``
``results``     a notebook's key numbers saved with their provenance (``save_results``)
``report``      the executed notebook made into an offline HTML report, its answer first
``runner``      papermill in a staging folder, one run per report at a time (``run_notebook``)
==============  ====================================================================================================

The names a notebook, the command line and the tests use are importable from here: ``xb.harness.check_namespace``,
``xb.harness.run_notebook``, ...
"""
from __future__ import annotations

from xenbench.harness.kernel import check_namespace, setup_plotly
from xenbench.harness.params import SEMANTIC_TYPES, ParamSpec, parse_cli_params, validate_params
from xenbench.harness.preflight import CHECKS, ce_name, plan_scoring, preflight, unused_params
from xenbench.harness.report import (FINDINGS_TAG, SUMMARY_TAG, final_progress, light_html, summarize_warnings,
                                     summary_first)
from xenbench.harness.results import REPORTS_ENV, reports_dir, runs_dir, save_results
from xenbench.harness.runner import IDENTITY_PARAMS, run_notebook, run_stem
from xenbench.harness.sizes import check_sizes, data_sizes
from xenbench.harness.spec import (BASE_PROFILE, FULL_PROFILE, NOTEBOOKS_DIR, Fit, NotebookSpec, list_notebooks,
                                   load_spec, notebook_path, profile_values)

__all__ = [
    "BASE_PROFILE", "FULL_PROFILE", "NOTEBOOKS_DIR", "REPORTS_ENV", "SUMMARY_TAG", "FINDINGS_TAG", "IDENTITY_PARAMS",
    "SEMANTIC_TYPES", "CHECKS",
    "ParamSpec", "NotebookSpec", "Fit",
    "list_notebooks", "notebook_path", "load_spec", "profile_values",
    "validate_params", "parse_cli_params",
    "data_sizes", "check_sizes",
    "preflight", "plan_scoring", "ce_name", "unused_params",
    "check_namespace", "setup_plotly",
    "reports_dir", "runs_dir", "save_results",
    "final_progress", "summarize_warnings", "summary_first", "light_html",
    "run_notebook", "run_stem",
]
