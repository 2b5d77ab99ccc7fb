"""Witnesses: cells of each committed result, re-derived with today's code from the committed inputs.

``xenbench findings --check`` compares the docs with the committed results; nothing compared the results with the
code. Each notebook's function here declares cells of its committed ``full`` results (seconds to minutes per
notebook) and recomputes them from the inputs the run read (the score stores, datasets and models in ``data/`` and
``models/``), through the same package functions the notebook calls. The cells are chosen so that every number of
the README's claims table rests on witnessed records: 02's whole (k_q × k_i) grid and every rank; 03's and 04's
first run (split, seed) of every method of their declared pairs at every budget and k (MF-IND excepted: its training
is 04's slowest cell), and for 03 one more run drawn at each verify (:func:`extra_runs`); 05's first seed of every
split regime; 06's CCSA at λ = 0 and 1 and its faiss baselines on the first seed; 00's every baseline accuracy (and label measure, once saved); 01's score statistics and fresh scores of a few pairs; 07's ANNCUR and DE
re-rank over every run. :func:`verify` runs them, with the two cheap checks: each recorded input digest against the
checkout (:func:`input_witnesses`) and every summary re-derived from the records in the same file
(:mod:`xenbench.studies.records`). A cell whose value today differs from the committed one by more than its stated
tolerance means a change to the code or the inputs has left that result behind: re-run the notebook
(:func:`rerun_command`). ``make test`` runs ``xenbench findings --verify``.

A notebook's function is registered like its findings::

    @register("02_rank_cls_vs_emb")
    def _rank(results: Mapping[str, Any]) -> list[Witness]:
        ...  # read the cells from ``results`` (the committed JSON), recompute them, one Witness per value

Tolerances. Computations that are exact in float64 on one machine (CUR errors, recalls as counts over queries) are
compared at 1e-6 relative (errors) or 1e-9 absolute (recalls): BLAS differences between machines are far below both.
A cell that inverts noise-level singular values (the plain pinv on the k_q = k_i diagonal) is ill-conditioned, so
machines differ there by more; it is compared at 5% relative, which still separates the two pinv rules (they differ
by orders of magnitude on that cell). AXN's regression (04) runs in torch and can order one near-tie differently on
another machine (measured: one hit of 35,100 at one cell): its recalls allow one (query, item) hit. A model trained
with torch on the CPU (06's CCSA) is reproducible on one machine but not across machines: the code of the committed 06
run (a7cb823), re-run on another machine, gave imbalance 1.111527467 against the committed 1.111519808 (6.9e-6
relative) and dev recall 0.8012 against 0.8018 (3 of 5,000 neighbours); its witnesses allow more (below), and are
no finer than that; its gold Recall@k counts 500 queries and moved by up to 3
of them (1e-2 absolute allowed), and faiss's k-means moves a posting list by a few items (1e-3 relative). torch's
thread count matters as much (the same code and machine at 1 and at 2 threads: 1.111838 against 1.111528, 2.8e-4
relative), so witnesses run at the thread count the run's provenance records (``machine.torch_threads``; files
written before it was recorded: this process's count). Machines can differ as much as thread counts: the committed
full run (AMD EPYC, 2 threads) and the same code (f1d7887) on an Intel Xeon at 2 threads (2026-11-28) gave λ = 1's
imbalance 1.111815 against 1.111528 (2.6e-4 relative) and its test recall 0.8044 against 0.8024; the tolerances are
about three times that (8e-4 relative, 6e-3 absolute), still far below what a change to the method moves.
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from xenbench._io import REPO_ROOT
from xenbench.errors import DataError, ParameterError
from xenbench.studies import notebooks as _notebooks

__all__ = ["Witness", "WITNESSED", "default_jobs", "extra_runs", "witness_seed", "register", "registered",
           "witnesses", "verify", "describe"]

#: Relative paths in a notebook's parameters are relative to the notebook's folder (its kernel's working directory).
NOTEBOOKS = REPO_ROOT / "notebooks"
#: Profiles whose committed results are witnessed (the reference runs of docs/FINDINGS.md).
PROFILES = ("full",)


#: Where a witness's "today" value comes from: recomputed from the inputs (score stores, datasets, models) with
#: today's code; re-derived from the raw records in the same results file; implied by the other numbers of the same
#: summary row (a summary whose records the file lacks); an input's digest in this checkout.
SOURCES = ("stores", "records", "summary", "inputs")
_TODAY = {"stores": "today", "records": "re-derived from the file's records", "summary": "implied by its row",
          "inputs": "the checkout's"}


@dataclass(frozen=True)
class Witness:
    """One committed value and the same value computed today.

    Attributes
    ----------
    notebook : str
        The notebook whose results hold the cell.
    cell : str
        What the value is, e.g. ``"grid cls-ce cutoff k_q=200 k_i=200 error"``.
    committed, today : float or str
        The value in the committed results file and the value today's code computes (NaN = no value, e.g. no
        recall); a string (a verdict, a digest) is compared exactly.
    rel_tol, abs_tol : float
        Tolerance of :func:`math.isclose`.
    source : str
        One of :data:`SOURCES`.
    profile : str
        The results file's profile (``full``, ``large``, ...).
    """

    notebook: str
    cell: str
    committed: float | str
    today: float | str
    rel_tol: float = 0.0
    abs_tol: float = 1e-9
    source: str = "stores"
    profile: str = "full"

    @property
    def ok(self) -> bool:
        """Both NaN, or equal within the tolerance; strings equal."""
        if isinstance(self.committed, str) or isinstance(self.today, str):
            return self.committed == self.today
        a, b = float(self.committed), float(self.today)
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return math.isclose(a, b, rel_tol=self.rel_tol, abs_tol=self.abs_tol)

    def line(self) -> str:
        """``notebook: cell: committed X, today Y (tolerance ...)`` (``today`` named by the :attr:`source`)."""
        where = self.notebook if self.profile == "full" else f"{self.notebook} ({self.profile})"
        if isinstance(self.committed, str) or isinstance(self.today, str):
            return (f"{where}: {self.cell}: committed {self.committed}, {_TODAY[self.source]} {self.today}"
                    f"{'' if self.ok else ' MISMATCH'}")
        tol = " and ".join(t for t in (f"{self.rel_tol:g} relative" if self.rel_tol else "",
                                        f"{self.abs_tol:g} absolute" if self.abs_tol else "") if t) or "exact"
        return (f"{where}: {self.cell}: committed {self.committed:.10g}, {_TODAY[self.source]} {self.today:.10g} "
                f"(tolerance {tol}){'' if self.ok else ' MISMATCH'}")


WitnessFn = Callable[[Mapping[str, Any]], list[Witness]]
#: Decorator: ``@register(notebook)`` on ``fn(results) -> list[Witness]``, which re-derives a few cells of
#: ``notebook``'s committed results (its row's ``witnesses`` in :data:`xenbench.studies.notebooks.NOTEBOOKS`).
register = partial(_notebooks.register, "witnesses")
#: Notebook name -> its witness function (:func:`xenbench.studies.notebooks.registered`).
registered = partial(_notebooks.registered, "witnesses")


def _or_nan(value: Any) -> float:
    """``value`` as a float, None (a statistic a dataset does not have, e.g. 00's mention share on BEIR) as NaN: a
    witness holds when both are NaN."""
    return math.nan if value is None else float(value)


def _path(value: str) -> Path:
    p = Path(value)
    return p if p.is_absolute() else (NOTEBOOKS / p).resolve()


#: The main tables of each notebook's results, which its witness cells are read from: each must be present and
#: non-empty, or the file fails --verify (emptied, its witnesses would check nothing). A secondary table left out
#: (03's budget rules, 06's faiss baselines) leaves its claims row "not tested", which the claims table says.
REQUIRED: dict[str, tuple[str, ...]] = {
    "00_data": ("domain",), "01_score_matrices": ("score_summary",), "02_rank_cls_vs_emb": ("grid",),
    "03_adacur_rounds": ("runs",), "04_axn_lambda": ("runs",),
    "05_pefa_lambda": ("coverage", "sweep_dev", "chosen", "gains"), "06_ccsa_balance": ("by_reg",),
    "07_compare_methods": ("summary",),
}
_ABSENT = "absent or empty"
#: The tables of each notebook's results that its witnesses recompute (a witness cell's first word names its table):
#: where the results hold one non-empty, a witness of it is required, so a witness block removed from a notebook's
#: function (06's faiss baselines, say) fails --verify instead of leaving the table silently unchecked.
#: tests/test_witnesses.py pins this table.
WITNESSED: dict[str, tuple[str, ...]] = {
    "00_data": ("domain", "baselines", "label_metrics"), "01_score_matrices": ("score_summary", "bundled", "agreement"),
    "02_rank_cls_vs_emb": ("grid", "ranks", "skew"), "03_adacur_rounds": ("runs", "budget_rules"),
    "04_axn_lambda": ("beta_first_split", "runs", "sweep_dev_first_run"),
    "05_pefa_lambda": ("coverage", "sweep_dev", "chosen", "gains"), "06_ccsa_balance": ("by_reg", "baselines"),
    "07_compare_methods": ("summary",),
}


def _missing(notebook: str, cell: str, needed: str) -> Witness:
    """A witness that fails: ``cell`` of the committed results, which a witness needs, is absent."""
    return Witness(notebook, cell, _ABSENT, needed, source="stores")


def witnesses(doc: Mapping[str, Any]) -> list[Witness]:
    """The witnesses of one results document (:func:`xenbench.studies.findings.load_results`); [] if its notebook
    declares none. A table of :data:`REQUIRED` that is absent or empty, or a file that gives no witness at all, is a
    witness that fails (a results file emptied of its cells must not pass for verified)."""
    fn = registered().get(doc["notebook"])
    if fn is None:
        return []
    import torch

    name, profile = str(doc["notebook"]), str(doc.get("profile", "full"))
    results = doc["results"]
    empty = [t for t in REQUIRED.get(name, ()) if not isinstance(results.get(t), (dict, list)) or not results[t]]
    if empty:
        return [replace(_missing(name, f"results[{t!r}]", "required (its witnessed cells)"), profile=profile)
                for t in empty]
    # Re-derive at the run's torch thread count where its provenance records one (see the module docstring).
    threads = ((doc.get("provenance") or {}).get("machine") or {}).get("torch_threads")
    before = torch.get_num_threads()
    torch.set_num_threads(int(threads) if threads else before)
    try:
        found = fn(results)
        if not found:
            return [replace(_missing(name, "every witness cell", "required (at least one)"), profile=profile)]
        tables = {w.cell.split()[0] for w in found}
        found += [Witness(name, f"witnesses of results[{t!r}] (witnesses.WITNESSED declares them)", "present",
                          "none recomputed") for t in WITNESSED.get(name, ())
                  if results.get(t) not in (None, [], {}) and t not in tables]
        return [replace(w, profile=profile) for w in found]
    finally:
        torch.set_num_threads(before)


def input_witnesses(doc: Mapping[str, Any], *, cache: dict | None = None,
                    log: Callable[[str], None] | None = None) -> list[Witness]:
    """One witness per input digest the document's provenance records (:func:`xenbench.provenance.check_inputs`):
    recorded against the checkout's; and the results' digest bound at the run (commit and each table,
    :func:`xenbench.provenance.check_results_digest`) against the file's own. What changed that no score depends on,
    and an input not found here, are logged as notes, not witnesses."""
    from xenbench import provenance

    name, profile = str(doc.get("notebook")), str(doc.get("profile", "full"))
    out = []
    commit = ((doc.get("provenance") or {}).get("git") or {}).get("commit")
    if commit is not None:  # the commit the file says produced it must be one of this repository's
        known = provenance.commit_known(commit)
        if known is None and log is not None:
            log(f"{name} ({profile}): its commit {str(commit)[:12]} cannot be checked here (no git history)")
        out.append(Witness(name, "provenance commit", str(commit),
                           "not a commit of this repository" if known is False else str(commit), source="inputs",
                           profile=profile))
    for what, recorded, today in provenance.check_results_digest(doc):  # an edited table, a swapped commit
        out.append(Witness(name, what, recorded, today, source="inputs", profile=profile))
    if (doc.get("provenance") or {}).get("code") and commit is not None:
        unlike, changed = provenance.check_code(doc)
        # the modules it ran must be those of its commit; those changed since are what may move its numbers
        out.append(Witness(name, "code the run imported (git blob ids) against its commit",
                           f"as at {str(commit)[:12]}", f"as at {str(commit)[:12]}" if not unlike else
                           "differs in " + ", ".join(unlike[:5]) + (" ..." if len(unlike) > 5 else ""),
                           source="inputs", profile=profile))
        if changed and log is not None:
            log(f"{name} ({profile}): {len(changed)} of the {len(doc['provenance']['code'])} modules it ran changed "
                f"since (its witnesses recompute with today's): " + ", ".join(changed[:8])
                + (" ..." if len(changed) > 8 else ""))
    for c in provenance.check_inputs(doc, cache=cache):
        if c.note and log is not None:
            log(f"{name} ({profile}): input {c.kind} {c.path}: {c.note}")
        if c.today is not None:
            out.append(Witness(name, f"input {c.kind} {c.path} sha256", str(c.recorded), c.today, source="inputs",
                               profile=profile))
    return out


#: The checks of :func:`verify`: input digests, summaries re-derived from their records, cells recomputed from the
#: stores (the slow part: seconds to minutes per notebook).
CHECKS = ("inputs", "records", "stores")


def _verify_file(path: Path, doc: Mapping[str, Any], checks: tuple[str, ...], cache: dict,
                 log: Callable[[str], None] | None) -> list[Witness]:
    """The witnesses of one results file ``path`` read as ``doc`` (:func:`verify`'s work per file), its lines
    logged."""
    from xenbench.studies import records

    profile = path.name.split(".")[-3]
    start = time.perf_counter()
    found: list[Witness] = []
    try:
        if "inputs" in checks:
            found += input_witnesses(doc, cache=cache, log=log)
        if "records" in checks:
            found += records.rederive(doc)
        if "stores" in checks and profile in PROFILES:
            found += witnesses(doc)
    except (KeyError, TypeError, IndexError, ValueError, AttributeError, ZeroDivisionError) as err:
        if isinstance(err, DataError):  # already names its file (an input, a store)
            raise
        # a results file without the cells its witnesses read, or with values of another type
        raise DataError(path, f"lacks what its witnesses read ({type(err).__name__}: {str(err)[:200]}); re-run "
                              "the notebook") from None
    if log is not None:
        for gap in records.unwitnessed(doc):
            log(f"{path.name}: unwitnessed: {gap}")
        bad = sum(not w.ok for w in found)
        by = ", ".join(f"{sum(w.source == s for w in found)} {s}" for s in SOURCES if any(w.source == s for w in found))
        log(f"{path.name}: {len(found)} witnesses ({by}), {bad} mismatched, {time.perf_counter() - start:.1f} s")
    return found


def _start_worker(seed: int, blas_threads: int) -> None:
    """A :func:`verify` worker process: the parent's witness seed (the same runs drawn as it logged) and its share of
    the cores for BLAS (torch's count is set per file, to the run's recorded one: :func:`witnesses`)."""
    import os

    from threadpoolctl import threadpool_limits

    os.environ[WITNESS_SEED_ENV] = str(seed)
    threadpool_limits(blas_threads)


def _verify_in_worker(path: Path, doc: Mapping[str, Any], checks: tuple[str, ...]) -> tuple[list[Witness], list[str]]:
    """:func:`_verify_file` in a worker: its witnesses and its log lines (an error reaches the parent as raised:
    xenbench's errors survive pickling, :class:`xenbench.errors.XenbenchError`)."""
    lines: list[str] = []
    return _verify_file(path, doc, checks, {}, lines.append), lines


#: Notebooks whose witnesses take longest, started first by a parallel :func:`verify` (so that no process is left
#: running one of them while the others have nothing to do): 06's trains two CCSA models and embeds its corpus, 194 of
#: the ~350 CPU-s of a whole verify on 2 cores (02's: 25 CPU-s).
SLOWEST_FIRST = ("06_ccsa_balance",)


def default_jobs() -> int:
    """Processes :func:`verify` runs at once by default (``xenbench findings --verify``): the cores this process may
    use."""
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def verify(results_dir: str | Path | None = None, *, notebooks: list[str] | None = None,
           log: Callable[[str], None] | None = None, checks: tuple[str, ...] = CHECKS, jobs: int = 1) -> list[Witness]:
    """Check every committed ``<name>.<profile>.results.json`` of the README's profiles in ``results_dir``.

    Parameters
    ----------
    results_dir
        Default: the committed reference runs, ``notebooks/results``.
    notebooks
        Only these notebooks (default: all with witnesses).
    log
        Called with one line per results file (its witness count and seconds) and one per note, in file order.
    checks
        Which of :data:`CHECKS`: ``"inputs"`` (each recorded input digest against the checkout,
        :func:`input_witnesses`), ``"records"`` (every summary re-derived from the file's own records,
        :func:`xenbench.studies.records.rederive`), ``"stores"`` (the notebook's witness cells recomputed from the
        stores with today's code, :func:`witnesses`; files of :data:`PROFILES` only).
    jobs
        Results files checked at once, each in a process of its own (spawned: it imports xenbench afresh); 1: one
        after the other in this process. The files' witnesses are independent, so any ``jobs`` gives the same
        witnesses in the same order. Each process keeps BLAS to its share of the cores (cores // jobs, at least 1);
        torch runs at each file's recorded thread count (:func:`witnesses`) whatever ``jobs`` is, so the recomputed
        values do not depend on it.

    Returns
    -------
    list of Witness
        All of them; the caller fails on any ``not w.ok``.
    """
    from xenbench._validation import check_int
    from xenbench.studies.findings import README_PROFILES, RESULTS_DIR, load_results

    unknown_checks = sorted(set(checks) - set(CHECKS))
    if unknown_checks or not checks:
        raise ParameterError("checks", f"a non-empty subset of {CHECKS}", checks, "verify")
    jobs = check_int(jobs, "jobs", 1, None, "verify")
    folder = Path(results_dir) if results_dir is not None else RESULTS_DIR
    if not folder.is_dir():
        raise DataError(folder, "no such folder of results files: nothing to verify")
    if notebooks is not None:
        unknown = sorted(set(notebooks) - set(registered()))
        if unknown:
            raise ParameterError("notebooks", f"notebooks with witnesses ({sorted(registered())})", unknown, "verify")
    if log is not None and "stores" in checks:
        log(f"witness seed {witness_seed()} draws the runs recomputed besides the first ({WITNESS_SEED_ENV}="
            f"{witness_seed()} draws them again)")
    docs = {}  # every file read and checked before any witness runs: a malformed one fails at once
    for path in sorted(folder.glob("*.results.json")):
        name, profile = path.name.split(".")[0], path.name.split(".")[-3]
        if profile in README_PROFILES and name in registered() and (notebooks is None or name in notebooks):
            docs[path] = load_results(path)
    out: list[Witness] = []
    if jobs == 1 or len(docs) < 2:
        cache: dict = {}  # input digests shared by the files (the same dataset or model read by several notebooks)
        for path, doc in docs.items():
            out += _verify_file(path, doc, checks, cache, log)
    else:
        import concurrent.futures
        import multiprocessing

        jobs = min(jobs, len(docs))
        # spawn, not fork: a forked child of a process that has run torch or OpenMP code can hang in its thread pools
        with concurrent.futures.ProcessPoolExecutor(
                jobs, mp_context=multiprocessing.get_context("spawn"), initializer=_start_worker,
                initargs=(witness_seed(), max(1, default_jobs() // jobs))) as pool:
            first = sorted(docs, key=lambda p: p.name.split(".")[0] not in SLOWEST_FIRST)  # a stable sort
            submitted = {path: pool.submit(_verify_in_worker, path, docs[path], tuple(checks)) for path in first}
            futures = [submitted[path] for path in docs]
            try:
                for future in futures:  # in file order: the same witnesses and lines as one process gives
                    found, lines = future.result()
                    for line in lines if log is not None else ():
                        log(line)
                    out += found
            except BaseException:
                for future in futures:  # the first error ends the check: the files not started are not run
                    future.cancel()
                raise
    if not out:
        raise DataError(folder, f"no results file with witnesses ({', '.join(README_PROFILES)} profiles of "
                                f"{sorted(notebooks or registered())}): nothing was verified")
    return out


def rerun_command(notebook: str, profile: str) -> str:
    """The commands that replace a committed results file: run the notebook, then record it (``make findings``)."""
    return (f"xenbench run {notebook} --profile {profile}, then copy reports/{notebook}.{profile}.results.json to "
            f"notebooks/results/ and run xenbench findings --write")


def describe(found: list[Witness]) -> list[str]:
    """One line per mismatched witness, then one per results file to re-run (:func:`rerun_command`)."""
    bad = [w for w in found if not w.ok]
    files = dict.fromkeys((w.notebook, w.profile) for w in bad)
    return [w.line() for w in bad] + [f"{nb} ({profile}): re-run: {rerun_command(nb, profile)}"
                                      for nb, profile in files]


# ------------------------------------------------------------------------------------------------
# 00: the described dataset and every baseline accuracy; 01: the bundled score stores and fresh scores of a few pairs
# ------------------------------------------------------------------------------------------------
@register("00_data")
def _data(results: Mapping[str, Any]) -> list[Witness]:
    """The inspected domain's statistics, and each first stage's accuracy on every evaluated dataset, and its label
    measures where the results have them (:func:`xenbench.studies.stats.baseline_metrics`; the DE's embeddings come
    from its cache when present; a run file's rows are not re-derived)."""
    from xenbench.data.sources import load_dataset
    from xenbench.studies.stats import (DEFAULT_FIRST_STAGES, ambiguity_summary, baseline_metrics, dataset_lengths,
                                        mention_ambiguity)

    p, committed = results["params"], results["domain"]
    ds = load_dataset(p["dataset"])
    lengths = dataset_lengths(ds, unit=p["length_unit"])
    today = {"items": len(ds.items), "queries": len(ds.queries),
             f"median_query_{p['length_unit']}": float(np.median(lengths["queries"])),
             f"median_item_{p['length_unit']}": float(np.median(lengths["items"])),
             "unambiguous_share": ambiguity_summary(mention_ambiguity(ds))["unambiguous_share"]}
    # a dataset without mention spans (BEIR) has no share: it must have none today too
    out = [Witness("00_data", f"domain {committed['name']} {key}", _or_nan(committed[key]), _or_nan(value), abs_tol=0.0,
                   rel_tol=1e-12) for key, value in today.items()]
    saved = pd.DataFrame(results.get("baselines") or [])
    labels = pd.DataFrame(results.get("label_metrics") or [])
    if not saved.empty:
        # a run file named in the parameters may not be in this checkout: the named first stages are re-derived
        stages = [s for s in p.get("first_stages", DEFAULT_FIRST_STAGES) if not str(s).startswith("run:")]
        acc, lab = baseline_metrics(list(dict.fromkeys(saved["dataset"])), first_stages=stages,
                                    k=int(p["n_candidates"]), max_queries=p["max_queries"], seed=p["seed"], device="cpu")
        acc = acc.set_index(["dataset", "retriever", "k"])
        for _, row in saved.iterrows():
            key = (row["dataset"], row["retriever"], row["k"])
            if key[1].startswith("run "):
                continue
            out.append(Witness("00_data", f"baselines {key[0]} {key[1]} accuracy@{key[2]}", float(row["accuracy"]),
                               float(acc.loc[key, "accuracy"]) if key in acc.index else float("nan")))
        lab = lab.set_index(["dataset", "retriever", "measure"])
        for _, row in labels.iterrows():  # results saved since 00 reported the label measures
            key = (row["dataset"], row["retriever"], row["measure"])
            if key[1].startswith("run "):
                continue
            out.append(Witness("00_data", f"label_metrics {key[0]} {key[1]} {key[2]}", float(row["value"]),
                               float(lab.loc[key, "value"]) if key in lab.index else float("nan")))
    return out


#: Fresh pairs scored per CE by 01's witness: the first queries × items of the run's own sample.
AGREEMENT_QUERIES, AGREEMENT_ITEMS = 2, 16


@register("01_score_matrices")
def _scores(results: Mapping[str, Any]) -> list[Witness]:
    """Each bundled store's statistics and shape; and each CE folder's fresh scores of
    :data:`AGREEMENT_QUERIES` × :data:`AGREEMENT_ITEMS` pairs of the run's sample against its store: their largest
    difference must stay within twice the run's largest over all its pairs (another machine's kernels differ by
    rounding), so a changed model, scorer or store is named."""
    from xenbench.data.sources import load_dataset
    from xenbench.data.store import compare_with_stores, open_stores
    from xenbench.models.loading import load_cross_encoder
    from xenbench.models.scoring import score_matrix
    from xenbench.studies.stats import sample_pairs, score_summary

    p = results["params"]
    stores = open_stores(_path(p["bundled_scores"]))
    today = score_summary({name: s.to_numpy() for name, s in stores.items()}).set_index("matrix")
    out = []
    for row in results["score_summary"]:
        for key in ("std", "median_query_skew", "median_top1_z"):
            out.append(Witness("01_score_matrices", f"score_summary {row['matrix']} {key}", float(row[key]),
                               float(today.loc[row["matrix"], key]), rel_tol=1e-6, abs_tol=0.0))
    for name, saved in (results.get("bundled") or {}).items():
        for axis, size in enumerate(saved["shape"]):
            out.append(Witness("01_score_matrices", f"bundled {name} shape[{axis}]", float(size),
                               float(stores[name].shape[axis]) if name in stores else float("nan"), abs_tol=0.0))
    agreement = {a["fresh"]: a for a in results.get("agreement") or []}
    if agreement:
        queries, items = sample_pairs(load_dataset(p["dataset"]), p["n_queries"], p["n_items"], seed=p["seed"])
        queries, items = queries[:AGREEMENT_QUERIES], items[:AGREEMENT_ITEMS]
        for folder in p["ces"]:
            name = str(folder).rstrip("/").split("/")[-1]
            if name not in agreement:
                continue
            scores = score_matrix(load_cross_encoder(_path(folder)), queries, items, device="cpu",
                                  batch_size=p["batch_size"], precision=p["precision"]).scores
            diff = compare_with_stores({name: scores}, stores, queries, items)
            committed = float(agreement[name]["max_abs_diff"])
            out.append(Witness("01_score_matrices", f"agreement {name}: max |fresh − store| over "
                               f"{int(diff['n_pairs'].iloc[0])} of the run's pairs (within 2× the run's "
                               f"{committed:.3g} over {agreement[name]['n_pairs']})", committed,
                               float(diff["max_abs_diff"].iloc[0]), rel_tol=0.0, abs_tol=committed))
    return out


# ------------------------------------------------------------------------------------------------
# 02: every cell of the (k_q × k_i) grid under both pinv rules, the ranks and the skewness
# ------------------------------------------------------------------------------------------------
#: Grid values witnessed per cell; ``cond`` and the recalls are skipped where the plain pinv inverts noise.
RANK_VALUES = ("error", "error_centered", "recall_at_m", "recall_at_budget", "cond")
#: Tolerance of a cell whose plain pinv inverts noise-level singular values (k_q = k_i): machine-dependent digits.
ILL_REL_TOL = 5e-2


@register("02_rank_cls_vs_emb")
def _rank(results: Mapping[str, Any]) -> list[Witness]:
    """Every grid cell (all the spike row and the CE comparison rest on), each rank rule's rank and the top
    component's share of every CE (the rank row), and the median skewness, from the stores."""
    from xenbench.studies.rank import cur_grid, load_matrices, rank_table, skew_table

    p = results["params"]
    grid = pd.DataFrame(results["grid"])
    if "pinv" not in grid.columns:
        grid = grid.assign(pinv="cutoff").rename(columns={"recall": "recall_at_budget"})
    ces = list(results.get("ces") or sorted(grid["ce"].unique()))
    M = load_matrices(_path(p["scores_dir"]), ces, max_queries=p["max_queries"], seed=p["seed"])
    out = []
    rules = sorted(grid["pinv"].unique())
    for ce in ces:
        today = cur_grid(M[ce], sorted(grid["k_q"].unique()), sorted(grid["k_i"].unique()), n_test=p["n_test"],
                         seed=p["seed"], budget=p["budget"], m=p.get("m"), k=p["k"], pinv_rules=rules)
        today = today.set_index(["pinv", "k_q", "k_i"])
        for _, row in grid[grid["ce"] == ce].iterrows():
            t = today.loc[(row["pinv"], row["k_q"], row["k_i"])]
            ill = row["pinv"] == "plain" and row["k_q"] == row["k_i"]  # inverts noise-level singular values
            name = f"grid {ce} {row['pinv']} pinv k_q={row['k_q']} k_i={row['k_i']}"
            for value in RANK_VALUES:
                if value not in row.index or value not in t.index:
                    continue
                if value in ("error", "error_centered"):
                    out.append(Witness("02_rank_cls_vs_emb", f"{name} {value}", float(row[value]), float(t[value]),
                                       rel_tol=ILL_REL_TOL if ill else 1e-6, abs_tol=0.0))
                elif not ill and value == "cond":
                    out.append(Witness("02_rank_cls_vs_emb", f"{name} {value}", float(row[value]), float(t[value]),
                                       rel_tol=1e-6, abs_tol=0.0))
                elif not ill:
                    out.append(Witness("02_rank_cls_vs_emb", f"{name} {value}", float(row[value]), float(t[value])))
    ranks = rank_table(M, (0.9, 0.99)) if results.get("ranks") else pd.DataFrame()
    for ce, saved in (results.get("ranks") or {}).items():
        for rule, value in saved.items():
            if rule in ranks.columns:
                out.append(Witness("02_rank_cls_vs_emb", f"ranks {ce} {rule}", float(value), float(ranks.loc[ce, rule]),
                                   rel_tol=1e-9, abs_tol=0.0))
    skew = skew_table(M) if results.get("skew") else pd.DataFrame()
    for ce, saved in (results.get("skew") or {}).items():
        for key, value in saved.items():
            if key in skew.columns:
                out.append(Witness("02_rank_cls_vs_emb", f"skew {ce} {key}", float(value), float(skew.loc[ce, key]),
                                   rel_tol=1e-6, abs_tol=0.0))
    return out


# ------------------------------------------------------------------------------------------------
# 03: one run (first split, first anchor seed) of every method of the declared pairs, and the budget-rule gap
# ------------------------------------------------------------------------------------------------
#: Notebook 03's witnessed methods (keys of :data:`xenbench.studies.adacur.COMPARABLE`): every method of its
#: declared pairs (the claims table's ADACUR rows), on the first split and anchor seed, at every budget.
ADACUR_METHODS = ("anncur", "anncur_de", "adacur_nosplit", "adacur_de_nosplit", "de_rerank")


def _store_setup(p: Mapping[str, Any], split_seeds: list[int]) -> tuple[Any, list[Any]]:
    """The exact matrix of a store-reading notebook (03, 07) and its query splits, as its parameters ``p`` made them."""
    from xenbench.studies.protocol import query_splits
    from xenbench.studies.setup import load_setup

    setup = load_setup(_path(p["scores_dir"]) / p["ce"], p["dataset"], seed=p["seed"], max_items=p["max_items"])
    return setup, query_splits(setup.M.shape[0], p["n_anchor_queries"], p["n_dev_queries"], split_seeds,
                               max_test=p["max_test_queries"])


_DE_SCORES: dict[tuple[str, str, int], np.ndarray] = {}


def _de_scores(setup: Any, key: tuple[str, str, int]) -> np.ndarray:
    """DE scores of every query row (:func:`~xenbench.studies.setup.retriever_scores`), once per process."""
    from xenbench.studies.setup import retriever_scores

    if key not in _DE_SCORES:
        _DE_SCORES[key] = retriever_scores(setup, device="cpu")[0]
    return _DE_SCORES[key]


#: Runs of 03 recomputed besides the first, drawn afresh at each verify (:func:`extra_runs`): a raw record of any run
#: edited, with its summaries and the results' digest recomputed to match, is caught by one verify with probability
#: EXTRA_RUNS / 14 (03 has 15 runs) and by repeated verifies in the end; one more run roughly doubles 03's witness time.
EXTRA_RUNS = 1
#: Environment variable fixing the draw of :func:`extra_runs` (an integer seed); unset, each process draws its own.
WITNESS_SEED_ENV = "XENBENCH_WITNESS_SEED"
_WITNESS_SEED: list[int] = []


def witness_seed() -> int:
    """The seed of this process's :func:`extra_runs` draw: ``$XENBENCH_WITNESS_SEED`` when set, else drawn once from
    the OS (``verify`` logs it, so a failing draw is reproduced by setting it)."""
    import os
    import secrets

    raw = os.environ.get(WITNESS_SEED_ENV)
    if raw is not None:
        try:
            return int(raw)
        except ValueError:
            raise ParameterError(WITNESS_SEED_ENV, "an integer seed", raw, "witnesses") from None
    if not _WITNESS_SEED:
        _WITNESS_SEED.append(secrets.randbits(32))
    return _WITNESS_SEED[0]


def extra_runs(candidates: list[tuple[int, int]], n: int | None = None) -> list[tuple[int, int]]:
    """``n`` (default :data:`EXTRA_RUNS`) of the ``(split seed, anchor seed)`` ``candidates``, drawn with
    :func:`witness_seed`, in their order."""
    n = EXTRA_RUNS if n is None else n
    if not candidates or n <= 0:
        return []
    picked = np.random.default_rng(witness_seed()).choice(len(candidates), size=min(n, len(candidates)), replace=False)
    return [candidates[i] for i in sorted(int(i) for i in picked)]


@register("03_adacur_rounds")
def _adacur(results: Mapping[str, Any]) -> list[Witness]:
    """The first run (first split and anchor seed) and :data:`EXTRA_RUNS` more drawn at verify time
    (:func:`extra_runs`) of every method of the declared pairs at every budget and k; the budget-rule gap."""
    from xenbench.studies.protocol import query_splits
    from xenbench.studies.adacur import METHODS, adacur_protocol_runs, budget_rule_gap, chosen_on_dev

    p = results["params"]
    setup, _ = _store_setup(p, p["split_seeds"][:1])
    committed = pd.DataFrame(results["runs"])
    k_values = sorted({int(r) for r in committed["k"]})
    budgets = sorted({int(b) for b in committed["budget"]})
    labels = set(committed["method"])
    methods = [m for m in ADACUR_METHODS if METHODS[m] in labels]
    de = _de_scores(setup, (p["ce"], p["dataset"], int(p["seed"]))) if any("de" in m for m in methods) else None
    every = [(int(s), int(a)) for s in p["split_seeds"] for a in p["anchor_seeds"]]
    out = []
    for split_seed, seed in every[:1] + extra_runs(every[1:]):
        split = query_splits(setup.M.shape[0], p["n_anchor_queries"], p["n_dev_queries"], [split_seed],
                             max_test=p["max_test_queries"])
        runs = adacur_protocol_runs(setup.M, split, [seed], budgets, methods=methods, k_values=k_values, de_scores=de,
                                    n_rounds=p["n_rounds"], device="cpu")
        today = chosen_on_dev(runs)
        for method in (METHODS[m] for m in methods):
            for budget in budgets:
                for k in k_values:
                    sel = lambda d: d[(d["split_seed"] == split_seed) & (d["anchor_seed"] == seed)  # noqa: E731
                                      & (d["method"] == method) & (d["budget"] == budget) & (d["k"] == k)]
                    c, t = sel(committed), sel(today)
                    if c.empty:  # a method deterministic given the split ran under the first anchor seed only
                        continue
                    cell = f"runs split {split_seed} seed {seed} {method} B_CE={budget} k={k}"
                    out.append(Witness("03_adacur_rounds", f"{cell} recall", float(c["value"].iloc[0]),
                                       float(t["value"].iloc[0]) if len(t) else float("nan")))
                    out.append(Witness("03_adacur_rounds", f"{cell} k_i chosen", float(c["setting"].iloc[0]),
                                       float(t["setting"].iloc[0]) if len(t) else float("nan"), abs_tol=0.0))
    saved_gap = pd.DataFrame(results.get("budget_rules") or [])
    if not saved_gap.empty:  # ANNCUR under both budget rules, every split and seed: cheap (no rounds, no DE)
        from xenbench.studies.protocol import query_splits

        splits = query_splits(setup.M.shape[0], p["n_anchor_queries"], p["n_dev_queries"], p["split_seeds"],
                              max_test=p["max_test_queries"])
        gap = budget_rule_gap(setup.M, splits, p["anchor_seeds"], sorted(saved_gap["budget"].unique()),
                              sorted(saved_gap["k"].unique())).set_index(["budget", "k"])
        for _, r in saved_gap.iterrows():
            t = gap.loc[(r["budget"], r["k"])]
            for value in ("mean", "min", "max", "cells", "recall_free_anchors", "recall_authors_code"):
                out.append(Witness("03_adacur_rounds", f"budget_rules B_CE={r['budget']} k={r['k']} {value}",
                                   float(r[value]), float(t[value]), rel_tol=1e-9, abs_tol=1e-12))
    return out


# ------------------------------------------------------------------------------------------------
# 04: the first run (first split, first seed) of every method but MF-IND, its dev sweeps and β
# ------------------------------------------------------------------------------------------------
#: Notebook 04's methods witnessed on the first run: all but MF-IND, whose training is the notebook's slowest cell.
AXN_METHODS = ("AXN, tuned λ", "AXN, λ = 0", "AXN DE, tuned λ", "AXN DE, λ = 0", "ADACUR TopK No-Split", "DE re-rank")


@register("04_axn_lambda")
def _axn(results: Mapping[str, Any]) -> list[Witness]:
    """β of the first split, the dev λ sweeps of AXN and AXN DE on it, and the test recall and chosen λ of every
    method but MF-IND on the first run (:func:`xenbench.studies.axn.axn_protocol_runs` with one split, one seed and
    no MF-IND), from the store and the DE's embeddings."""
    from xenbench.methods.axn import prior_scale
    from xenbench.studies.protocol import query_splits
    from xenbench.studies.axn import axn_protocol_runs
    from xenbench.studies.setup import de_embeddings, load_setup

    p = results["params"]
    setup = load_setup(_path(p["scores_dir"]) / p["ce"], p["dataset"], seed=p["seed"], max_items=p["max_items"])
    M = setup.M
    n_dev = p["n_dev_queries"] if "n_dev_queries" in p else p["dev_queries"]  # 04 named it dev_queries until 2026-11
    first = query_splits(M.shape[0], p["n_anchor_queries"], n_dev, p["split_seeds"][:1],
                         max_test=p["max_test_queries"])
    V, U = de_embeddings(setup, device="cpu")
    beta = prior_scale(M[first[0].anchor], (U @ V.T)[first[0].anchor])
    out = [Witness("04_axn_lambda", "beta_first_split", float(results["beta_first_split"]), float(beta),
                   rel_tol=1e-6, abs_tol=0.0)]
    seed = int(p["first_round_seeds"][0])
    runs, dev = axn_protocol_runs(M, first, V, U, seeds=[seed], lambdas=p["lambdas"], budgets=p["budgets"],
                              k_values=p["k_values"], n_rounds=p["n_rounds"], mf_epochs=0, progress=False,
                              device="cpu")
    keys = ["method", "budget", "k"]
    committed = pd.DataFrame(results["runs"])
    committed = committed[(committed["split_seed"] == first[0].seed) & (committed["anchor_seed"] == seed)
                          & committed["method"].isin(AXN_METHODS)].set_index(keys)
    today = runs.set_index(keys)
    for key, row in committed.iterrows():
        cell = f"runs split {first[0].seed} seed {seed} {key[0]} B_CE={key[1]} k={key[2]}"
        t = today.loc[key] if key in today.index else None
        # One hit of n_test · k may differ across machines: AXN's float64 regression, fitted in torch, can order a
        # near-tie differently (measured: 1 of 35,100 at AXN DE, B_CE = 200, k = 100, on another Xeon than the run's).
        one_hit = 1.0 / (int(row["n_queries"]) * key[2])
        out.append(Witness("04_axn_lambda", f"{cell} recall", float(row["value"]),
                           float("nan") if t is None else float(t["value"]), abs_tol=1.01 * one_hit))
        if key[0].endswith("tuned λ"):
            out.append(Witness("04_axn_lambda", f"{cell} λ chosen on dev", float(row["setting"]),
                               float("nan") if t is None else float(t["setting"]), abs_tol=0.0))
    sweep = pd.DataFrame(results.get("sweep_dev_first_run") or [])
    if not sweep.empty:
        dev = dev.set_index(["method", "lam", "budget", "k"])
        for _, row in sweep[sweep["method"].isin(["AXN", "AXN DE"])].iterrows():
            key = (row["method"], row["lam"], row["budget"], row["k"])
            out.append(Witness("04_axn_lambda", f"sweep_dev_first_run {key[0]} λ={key[1]:g} B_CE={key[2]} k={key[3]} "
                               "recall", float(row["recall"]), float(dev.loc[key, "recall"]) if key in dev.index
                               else float("nan")))
    return out


# ------------------------------------------------------------------------------------------------
# 05: PEFA on the first seed of every split regime (needs the DE embeddings of the pooled datasets)
# ------------------------------------------------------------------------------------------------
@register("05_pefa_lambda")
def _pefa(results: Mapping[str, Any]) -> list[Witness]:
    """Per split regime, its first seed end to end (:func:`xenbench.methods.pefa.tune_and_test`): the seen share,
    every dev sweep cell, the chosen settings and every gain row (the claims table's PEFA row rests on them)."""
    from xenbench.studies.pefa import tune_and_test
    from xenbench.studies.splits import gold_groups, make_split, pool_datasets, pooled_embeddings

    p = results["params"]
    ds = pool_datasets(p["datasets"])
    P, U = pooled_embeddings(p["datasets"], device="cpu")
    seed = int(p["seed"])
    out = []
    for regime in p["splits"]:
        split = make_split(regime, gold_groups(ds), p["eval_fraction"], p["dev_fraction"], seed=seed)
        today = tune_and_test(ds, P, U, split, p["lambdas"], p["k_values"], p["n_neighbors"], index=p["index"])
        of_run = lambda d: d[(d["split"] == regime) & (d["seed"] == seed)]  # noqa: E731
        cov = of_run(pd.DataFrame(results["coverage"])).iloc[0]
        for key in ("seen_test", "seen_dev", "test", "dev", "train"):
            out.append(Witness("05_pefa_lambda", f"coverage {regime} seed {seed} {key}", float(cov[key]),
                               float(today["coverage"][key].iloc[0])))
        for what, keys, values in (("sweep_dev", ["method", "lam", "k"], ["recall"]),
                                   ("chosen", ["method", "k"], ["lam", "n_neighbors", "dev_recall"]),
                                   ("gains", ["method", "k", "subset"], ["n", "recall", "de_recall", "gain", "gain_se"])):
            t = today[what].set_index(keys)
            for _, row in of_run(pd.DataFrame(results[what])).iterrows():
                key = tuple(row[k] for k in keys)
                for v in values:
                    out.append(Witness("05_pefa_lambda", f"{what} {regime} seed {seed} "
                                       + " ".join(f"{k}={x}" for k, x in zip(keys, key)) + f" {v}", float(row[v]),
                                       float(t.loc[key, v]) if key in t.index else float("nan")))
    return out


# ------------------------------------------------------------------------------------------------
# 06: CCSA at λ = 0 and λ = 1 (first seed), trained as the notebook trains it, and the faiss baselines of that seed
# ------------------------------------------------------------------------------------------------
#: Notebook 06's witnessed λ values (with the sweep's batch size) of the first seed: λ = 0, the base of every claims
#: row of 06 (the balance curve is read against it; its dev-best λ is 0 in every committed run), and λ = 1.
CCSA_REGS = (0.0, 1.0)
#: Tolerances of 06's witnesses: about 3x the largest difference measured between two machines running the same code
#: (AMD EPYC vs Intel Xeon: 2.6e-4 relative imbalance, 0.002 recall; module docstring).
#: Gold Recall@k counts queries (500 per part): the same code on this machine and the run's moved it by up to 3 of them.
#: faiss's k-means moves a list's size by a few items between machines (postings at nprobe 16: 1.6e-4 relative).
CCSA_IMBALANCE_REL_TOL, CCSA_RECALL_ABS_TOL, CCSA_GOLD_ABS_TOL, FAISS_POSTINGS_REL_TOL = 8e-4, 6e-3, 1e-2, 1e-3


@register("06_ccsa_balance")
def _ccsa(results: Mapping[str, Any]) -> list[Witness]:
    """The first seed's CCSA at each of :data:`CCSA_REGS` (dev and test: imbalance, both recalls) and its faiss
    baselines at every nprobe (IVF-Flat, IVF-PQ and OPQ+IVF-PQ: both recalls, postings), from the datasets."""
    from xenbench.studies.ccsa import (balance_sweep, eval_split, evaluated_rows, exact_ip_topk, faiss_baselines,
                                       pq_for_bytes)
    from xenbench.studies.corpus import load_corpus

    p = results["params"]
    corpus = load_corpus(p["dataset"], progress=False)
    train = np.concatenate([corpus.items, corpus.queries])
    seed = p["seeds"][0]
    rows, split = evaluated_rows(eval_split(len(corpus.queries), p["n_eval_queries"], seed))
    Q, rel = corpus.queries[rows], corpus.relevant[rows]
    exact = exact_ip_topk(Q, corpus.items, p["k"])
    committed = pd.DataFrame(results["by_reg"])
    committed = committed[committed["seed"] == seed] if "seed" in committed else committed
    regs = [r for r in CCSA_REGS if (committed["reg"] == r).any()]
    absent = [_missing("06_ccsa_balance", f"by_reg λ={r:g} seed {seed}", "required (the claims rest on it)")
              for r in CCSA_REGS if r not in regs]
    today, _ = balance_sweep(train, corpus.items, Q, [(r, p["batch_size"]) for r in regs], exact=exact, relevant=rel,
                             split=split, n_chunks=p["n_chunks"], chunk_size=p["chunk_size"], k=p["k"], m=p["m"],
                             shortlist=p["shortlist"], progress=False, seed=seed, steps=p["steps"],
                             temperature=p["temperature"], lr=p["lr"], device="cpu") if regs else (None, None)
    out = absent
    for reg in regs:
        for part in ("dev", "test"):
            sel = lambda d: d[(d["reg"] == reg) & (d["batch_size"] == p["batch_size"]) & (d["split"] == part)]  # noqa: E731
            c, t = sel(committed).iloc[0], sel(today).iloc[0]
            cell = f"by_reg λ={reg:g} B={p['batch_size']} seed {seed} {part}"
            out.append(Witness("06_ccsa_balance", f"{cell} imbalance", float(c["imbalance"]), float(t["imbalance"]),
                               rel_tol=CCSA_IMBALANCE_REL_TOL, abs_tol=0.0))
            for value, tol in (("recall", CCSA_RECALL_ABS_TOL), ("gold_recall", CCSA_GOLD_ABS_TOL)):
                out.append(Witness("06_ccsa_balance", f"{cell} {value}", float(c[value]), float(t[value]), abs_tol=tol))
    base = pd.DataFrame(results.get("baselines") or [])
    if not base.empty:  # faiss k-means and PQ training, one thread: deterministic given the seed
        base = base[base["seed"] == seed] if "seed" in base else base
        pq = tuple(results.get("pq") or pq_for_bytes(p["n_chunks"], p["chunk_size"], corpus.items.shape[1]))
        nprobes = sorted(int(w) for w in base["nprobe"].unique())
        faiss_today = faiss_baselines(train, corpus.items, Q, p["chunk_size"], nprobes, exact=exact, relevant=rel,
                                      split=split, pq=pq, k=p["k"], m=p["m"], shortlist=p["shortlist"],
                                      seed=seed).set_index(["method", "nprobe", "split"])
        for _, c in base.iterrows():
            key = (c["method"], c["nprobe"], c["split"])
            cell = f"baselines {key[0]} nprobe={key[1]} seed {seed} {key[2]}"
            t = faiss_today.loc[key]
            for value, tol in (("recall", CCSA_RECALL_ABS_TOL), ("gold_recall", CCSA_GOLD_ABS_TOL)):
                out.append(Witness("06_ccsa_balance", f"{cell} {value}", float(c[value]), float(t[value]), abs_tol=tol))
            out.append(Witness("06_ccsa_balance", f"{cell} postings", float(c["postings"]), float(t["postings"]),
                               rel_tol=FAISS_POSTINGS_REL_TOL, abs_tol=0.0))
    return out


# ------------------------------------------------------------------------------------------------
# 07: ANNCUR at one budget and DE re-rank at every budget, averaged over every run (the file saves summaries only)
# ------------------------------------------------------------------------------------------------
#: Notebook 07's witnessed budget of ANNCUR (dev-chosen k_i per run, over all runs); DE re-rank at every budget.
COMPARE_BUDGET = 50


@register("07_compare_methods")
def _compare(results: Mapping[str, Any]) -> list[Witness]:
    """The summary's mean test recall of ANNCUR at :data:`COMPARE_BUDGET` (every k ≤ it) and of DE re-rank at every
    budget and k, recomputed over every run from the store (07 saved no per-run records before its re-run)."""
    from xenbench.studies.adacur import METHODS, adacur_protocol_runs, chosen_on_dev

    p = results["params"]
    setup, splits = _store_setup(p, p["split_seeds"])
    summary = pd.DataFrame(results["summary"])
    out = []
    de = (_de_scores(setup, (p["ce"], p["dataset"], int(p["seed"]))) if (summary["method"] == METHODS["de_rerank"]).any()
          else None)
    for method, budgets in (("anncur", [COMPARE_BUDGET]), ("de_rerank", sorted(int(b) for b in p["budgets"]))):
        if not (summary["method"] == METHODS[method]).any():
            continue
        k_values = [int(k) for k in p["k_values"] if k <= max(budgets)]
        today = chosen_on_dev(adacur_protocol_runs(setup.M, splits, p["anchor_seeds"], budgets, methods=[method],
                                                   k_values=k_values, de_scores=de, device="cpu"))
        for budget in budgets:
            for k in [k for k in k_values if k <= budget]:
                c = summary[(summary["method"] == METHODS[method]) & (summary["budget"] == budget) & (summary["k"] == k)]
                t = today[(today["method"] == METHODS[method]) & (today["budget"] == budget) & (today["k"] == k)]
                if c.empty:
                    continue
                out.append(Witness("07_compare_methods", f"summary {METHODS[method]} B_CE={budget} k={k} mean test "
                                   f"recall over {len(t)} runs", float(c["mean"].iloc[0]), float(t["value"].mean())))
    return out
