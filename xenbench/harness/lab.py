"""Notebooks that JupyterLab leaves clean: the tracked notebooks in one normalized form, which the lab's saves keep.

Opening a notebook in JupyterLab marks it changed (the kernel adds its ``language_info``) and the lab autosaves it:
keys sorted, the kernel's Python version, and, once cells run, their outputs and execution counts. Each save of a
tracked notebook made the checkout dirty, so every later run's provenance said ``dirty: True``.

Two pieces keep the checkout clean:

* :func:`normalize_notebook`: the form every tracked notebook is saved in (``xenbench notebooks normalize``; a test
  checks it): no outputs or execution counts, cell metadata reduced to its ``tags``, the notebook's metadata to
  :data:`KERNELSPEC` and ``language_info: {"name": "python"}``, written as Jupyter's own server writes a notebook
  (:func:`nbformat.writes`: keys sorted, one-space indent, a final newline).
* :func:`lab_pre_save_hook`: every Jupyter server started from the project's environment installs it (a server
  extension, :func:`_load_jupyter_server_extension`, enabled by ``jupyter-config/jupyter_server_config.d/xenbench.json``,
  which installing the project puts in the environment's ``etc/jupyter``: plain ``jupyter lab``, ``make lab`` and
  ``python -m jupyter_server`` alike, from any folder; Jupyter reads no config file from the working directory), so
  every save of a xenbench notebook (a notebook in :data:`~xenbench.harness.spec.NOTEBOOKS_DIR` with its profiles
  file) writes the normalized form: opening and running one leaves its file as it was; an edit of its cells is kept
  (without outputs: a run's outputs live in its report, ``reports/``). Other notebooks are saved as the lab sends them.
"""
from __future__ import annotations

import copy
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from xenbench._io import write_text_atomic
from xenbench.errors import DataError
from xenbench.harness.spec import NOTEBOOKS_DIR, list_notebooks

__all__ = ["KERNELSPEC", "LANGUAGE_INFO", "normalize_notebook", "normalized_text", "normalize_files",
           "lab_pre_save_hook"]

#: The kernel every notebook names (what JupyterLab's default Python kernel writes).
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
#: The ``language_info`` kept: its name only (the kernel's version and lexer fields depend on the machine).
LANGUAGE_INFO = {"name": "python"}
#: Cell metadata kept: the ``parameters`` tag papermill reads (and any other tag); the rest is the lab's view state
#: (``collapsed``, ``scrolled``, ``jupyter``, ``execution`` timings).
_CELL_METADATA = ("tags",)


def normalize_notebook(nb: Mapping[str, Any]) -> Any:
    """A copy of notebook ``nb`` (a dict or ``NotebookNode``, nbformat 4) in the normalized form: outputs and execution
    counts dropped, each cell's metadata reduced to its non-empty ``tags``, the notebook's metadata to
    :data:`KERNELSPEC` and :data:`LANGUAGE_INFO` (other notebook metadata kept). Cell ids, sources and
    attachments are kept."""
    import nbformat

    out = nbformat.from_dict(copy.deepcopy(dict(nb)))
    for cell in out.cells:
        meta = {k: cell.metadata[k] for k in _CELL_METADATA if cell.get("metadata", {}).get(k)}
        cell.metadata = nbformat.from_dict(meta)
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
    out.metadata.pop("widgets", None)  # saved widget state: a run's, not the notebook's
    out.metadata["kernelspec"] = nbformat.from_dict(dict(KERNELSPEC))
    out.metadata["language_info"] = nbformat.from_dict(dict(LANGUAGE_INFO))
    return out


def normalized_text(nb: Mapping[str, Any]) -> str:
    """The file text of :func:`normalize_notebook` of ``nb``, byte for byte as the Jupyter server writes a notebook
    (:func:`nbformat.write`: :func:`nbformat.writes` and a final newline)."""
    import nbformat

    text = nbformat.writes(normalize_notebook(nb), version=nbformat.NO_CONVERT)
    return text if text.endswith("\n") else text + "\n"


def normalize_files(paths: Iterable[str | os.PathLike[str]] | None = None, *, write: bool = True) -> list[Path]:
    """Rewrite each notebook file in ``paths`` (default every notebook of :data:`~xenbench.harness.spec.NOTEBOOKS_DIR`)
    in its normalized form (:func:`normalized_text`, atomically); with ``write=False`` only report. Returns the files
    that were not in that form.

    Raises
    ------
    DataError
        A file that is not a readable nbformat-4 notebook, naming it.
    """
    import nbformat

    files = [Path(p) for p in paths] if paths is not None else [NOTEBOOKS_DIR / f"{n}.ipynb" for n in list_notebooks()]
    changed = []
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
            nb = nbformat.reads(text, as_version=4)
        except (OSError, UnicodeDecodeError, ValueError) as err:  # nbformat's NotJSONError is a ValueError
            raise DataError(path, f"not a readable notebook ({type(err).__name__}: {str(err)[:200]})") from None
        new = normalized_text(nb)
        if new != text:
            changed.append(path)
            if write:
                write_text_atomic(path, new)
    return changed


def _is_xenbench_notebook(path: str, contents_manager: Any) -> bool:
    """Whether the API path ``path`` (relative to the server's root) is a notebook of
    :data:`~xenbench.harness.spec.NOTEBOOKS_DIR` with its profiles file beside it."""
    root = Path(getattr(contents_manager, "root_dir", ".") or ".")
    try:
        where = (root / path.lstrip("/")).resolve()
    except OSError:
        return False
    return where.parent == NOTEBOOKS_DIR.resolve() and where.suffix == ".ipynb" and where.with_suffix(".yaml").is_file()


def lab_pre_save_hook(model: dict[str, Any], path: str, contents_manager: Any = None, **kwargs: Any) -> None:
    """The Jupyter server's ``pre_save_hook`` of ``make lab``: a xenbench notebook's content is replaced (in place) by
    its :func:`normalize_notebook` form before the server writes it; any other file is left alone.

    Installed by the server extension below; by hand: ``--ContentsManager.pre_save_hook=xenbench.harness.lab.lab_pre_save_hook``.
    """
    if model.get("type") != "notebook" or not isinstance(model.get("content"), Mapping):
        return
    if not _is_xenbench_notebook(path, contents_manager):
        return
    model["content"] = normalize_notebook(model["content"])


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    """Jupyter server's entry point: this module is a server extension (enabled in the environment's config)."""
    return [{"module": "xenbench.harness.lab"}]


def _load_jupyter_server_extension(serverapp: Any) -> None:
    """Install :func:`lab_pre_save_hook` on the server's contents manager, once (a ``pre_save_hook`` set on the command
    line or in a config file to the same hook is not doubled)."""
    cm = serverapp.contents_manager
    if cm.pre_save_hook is not lab_pre_save_hook and lab_pre_save_hook not in cm._pre_save_hooks:
        cm.register_pre_save_hook(lab_pre_save_hook)
    serverapp.log.info("xenbench: saves of the tracked notebooks keep their normalized form (xenbench.harness.lab)")
