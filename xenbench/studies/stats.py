"""Descriptive statistics of datasets and the baseline numbers every notebook starts from.

Pure computations on :class:`~xenbench.data.datasets.Dataset` objects; :mod:`xenbench.viz.plots` draws them.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

import numpy as np
import pandas as pd

from xenbench._validation import PY_INT, check_array, check_int
from xenbench.data.datasets import Dataset, Item, Query, sample_queries  # sample_queries: re-exported
from xenbench.errors import ParameterError
from xenbench.sampling import sample_rows

__all__ = [
    "title_lemmas",
    "mention_text",
    "ambiguity_summary",
    "ambiguity_line",
    "text_lengths",
    "dataset_lengths",
    "mention_ambiguity",
    "query_examples",
    "sample_queries",
    "DEFAULT_FIRST_STAGES",
    "baseline_accuracy",
    "baseline_metrics",
    "unit_comparison",
]

log = logging.getLogger(__name__)


def title_lemmas(item: Item) -> list[str]:
    """Lower-cased lemmas of an item title: WordNet-EL titles list a synset's lemmas joined by ``", "``."""
    return [lemma.strip().lower() for lemma in item.title.split(", ") if lemma.strip()]


def mention_text(query: Query) -> str | None:
    """The mention's surface form (``query.text[start:end]``), or ``None`` when the query marks none."""
    if query.mention is None:
        return None
    start, end = query.mention
    return query.text[start:end]


def text_lengths(
    texts: Sequence[str],
    *,
    unit: Literal["words", "tokens"] = "words",
    tokenizer: Any = None,
) -> np.ndarray:
    """Length of each text in whitespace words or in tokenizer tokens.

    Parameters
    ----------
    texts : sequence of str
    unit : {"words", "tokens"}
        ``"tokens"`` counts word pieces without special tokens: what a cross-encoder pays for.
    tokenizer : Hugging Face tokenizer, optional
        For ``unit="tokens"``; default the bundled all-MiniLM-L6-v2 tokenizer.

    Returns
    -------
    ndarray of shape (len(texts),), int64
    """
    if unit == "words":
        return np.array([len(t.split()) for t in texts], dtype=np.int64)
    if unit != "tokens":
        raise ParameterError("unit", "'words' or 'tokens'", unit, "text_lengths")
    if tokenizer is None:
        from transformers import AutoTokenizer

        from xenbench.models.crossencoder import bundled_backbone

        tokenizer = AutoTokenizer.from_pretrained(bundled_backbone(), trust_remote_code=False)
    if not texts:
        return np.zeros(0, dtype=np.int64)
    ids = tokenizer(list(texts), add_special_tokens=False, truncation=False)["input_ids"]
    return np.array([len(row) for row in ids], dtype=np.int64)


def dataset_lengths(dataset: Dataset, *, unit: Literal["words", "tokens"] = "words",
                    tokenizer: Any = None) -> dict[str, np.ndarray]:
    """Lengths of the texts the retrievers see: ``{"queries": (nq,), "items": (nb,)}``.

    Items are measured as ``"title: text"`` (:func:`xenbench.models.retrievers.item_text`).
    """
    from xenbench.models.retrievers import item_text

    if unit == "tokens" and tokenizer is None:
        from transformers import AutoTokenizer

        from xenbench.models.crossencoder import bundled_backbone

        tokenizer = AutoTokenizer.from_pretrained(bundled_backbone(), trust_remote_code=False)
    return {
        "queries": text_lengths([q.text for q in dataset.queries], unit=unit, tokenizer=tokenizer),
        "items": text_lengths([item_text(it) for it in dataset.items], unit=unit, tokenizer=tokenizer),
    }


def query_examples(dataset: Dataset, n: int = 5, seed: int = 0) -> pd.DataFrame:
    """A seeded sample of ``n`` queries with their mention and gold item, for reading.

    Returns
    -------
    pandas.DataFrame
        Columns ``query``, ``mention``, ``gold title``, ``gold text``.
    """
    sample = sample_queries(dataset, n, seed)
    rows = []
    for q in sample:
        gold = dataset.item(dataset.gold[q.id][0])
        rows.append({"query": q.text, "mention": mention_text(q), "gold title": gold.title, "gold text": gold.text})
    return pd.DataFrame(rows, columns=["query", "mention", "gold title", "gold text"])


def _common_prefix(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def mention_ambiguity(dataset: Dataset, queries: Sequence[Query] | None = None) -> np.ndarray:
    """How many items of the dataset share each query's mention: the ambiguity a linker must resolve.

    An item *shares* the mention when the lower-cased mention surface form, or the lemma it
    inflects, is one of the item's title lemmas (:func:`title_lemmas`). The mention's lemma is the
    gold item's title lemma one of whose regular inflections (:func:`xenbench.data.wordnet.lemma_forms`
    without the exception list) is the surface form; for an irregular form (``mice``) it is the gold
    lemma with the longest common prefix. So the gold item itself counts and 1 means unambiguous.

    Parameters
    ----------
    dataset : Dataset
    queries : sequence of Query, optional
        Default all of ``dataset.queries``.

    Returns
    -------
    ndarray of shape (nq,), int64
        0 for a query without a mention span.
    """
    from xenbench.data.wordnet import lemma_forms

    rows_by_lemma: dict[str, set[int]] = {}
    for row, item in enumerate(dataset.items):
        for lemma in title_lemmas(item):
            rows_by_lemma.setdefault(lemma, set()).add(row)
    item_index = dataset.item_index
    queries = dataset.queries if queries is None else queries
    out = np.zeros(len(queries), dtype=np.int64)
    for n, query in enumerate(queries):
        surface = mention_text(query)
        if surface is None:
            continue
        surface = surface.lower()
        keys = {surface}
        for gold_id in dataset.gold.get(query.id, [])[:1]:
            row = item_index.get(gold_id)
            if row is None:
                continue
            lemmas = title_lemmas(dataset.items[row])
            pos = "v" if gold_id.endswith("-v") else "n"  # WordNet-EL ids end in -n / -v
            matched = [lemma for lemma in lemmas if surface in lemma_forms(lemma, pos, {})]
            if not matched and lemmas:
                matched = [max(lemmas, key=lambda lemma: _common_prefix(lemma, surface))]
            keys.update(matched)
        out[n] = len(set().union(*(rows_by_lemma.get(key, set()) for key in keys)))
    return out


def ambiguity_summary(ambiguity: np.ndarray) -> dict[str, Any]:
    """:func:`mention_ambiguity` summarized over the queries that have a mention span (those counted > 0).

    Parameters
    ----------
    ambiguity : ndarray of shape (nq,)
        From :func:`mention_ambiguity`: 0 for a query without a mention span.

    Returns
    -------
    dict
        ``queries`` (nq), ``mentions`` (queries with a span), and over those ``unambiguous_share`` (share shared by
        one item only), ``max`` and ``mean``; the last three None when no query has a span (a BEIR folder has none:
        ambiguity given the span does not apply, and a mean over no mention is not taken).
    """
    a = np.asarray(ambiguity)
    spans = a[a > 0]
    if spans.size == 0:
        return {"queries": int(a.size), "mentions": 0, "unambiguous_share": None, "max": None, "mean": None}
    return {"queries": int(a.size), "mentions": int(spans.size), "unambiguous_share": float((spans == 1).mean()),
            "max": int(spans.max()), "mean": float(spans.mean())}


def ambiguity_line(ambiguity: np.ndarray) -> str:
    """One sentence of :func:`ambiguity_summary` (notebook 00, section 3)."""
    s = ambiguity_summary(ambiguity)
    if s["mentions"] == 0:
        return (f"None of the {s['queries']} queries marks a mention span (BEIR queries have none): mention ambiguity "
                "does not apply to this dataset.")
    return (f"{s['unambiguous_share']:.1%} of the {s['mentions']} mentions are shared by one item only; the most shared "
            f"by {s['max']} items; mean over mentions {s['mean']:.2f}.")


#: The first stages notebook 00 compares by default (:func:`xenbench.models.retrievers.make_retriever` specs).
DEFAULT_FIRST_STAGES: tuple[str, ...] = ("de", "tfidf", "bm25")
#: Depth every first stage retrieves for the label measures: R@100 reads 100 items.
LABEL_DEPTH = 100


def _built(retrievers: Mapping[str, Any] | None, first_stages: Sequence[str], device: Any) -> dict[str, Any]:
    from xenbench.models.retrievers import first_stage_label, make_retriever

    if retrievers is None:
        return {first_stage_label(spec): make_retriever(spec, device=device, owner="baseline_metrics")
                for spec in first_stages}
    # factories are called once and reused
    return {name: (r() if isinstance(r, type) or not hasattr(r, "fit") else r) for name, r in retrievers.items()}


def baseline_metrics(
    datasets: Iterable[Dataset | str],
    *,
    first_stages: Sequence[str] = DEFAULT_FIRST_STAGES,
    k: int = 64,
    max_queries: int | None = None,
    seed: int = 0,
    retrievers: Mapping[str, Any] | None = None,
    device: Any = "auto",
    measures: Sequence[str] | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """First-stage baselines on each dataset: accuracy@1 and accuracy@k, and the label measures of the graded qrels.

    Each first stage indexes all the dataset's items and retrieves the top ``max(k, 100)`` for (a sample of) its
    queries (:func:`sample_queries`), once: accuracy reads the first ``k``, the label measures the whole list.

    Parameters
    ----------
    datasets : iterable of Dataset or str
        Datasets, or specs for :func:`xenbench.data.sources.load_dataset` (``"wordnet-el:noun.food"``).
    first_stages : sequence of str
        :func:`xenbench.models.retrievers.make_retriever` specs: ``"de"``, ``"tfidf"``, ``"bm25"``,
        ``"run:<path>"`` (a TREC run file holding every evaluated query; then one dataset only).
    k : int
        Candidates retrieved per query (the re-ranking budget of later notebooks).
    max_queries : int, optional
        Evaluate a seeded sample of this many queries per dataset (:func:`sample_queries`).
    seed : int
    retrievers : mapping of str to retriever or zero-argument factory, optional
        Objects with ``fit(items)`` and ``search(queries, k) -> (D, I)`` under their table names; replaces
        ``first_stages``.
    device : str or torch.device
        Where the DE encodes (``"auto"``: CUDA when available; see :class:`xenbench.models.retrievers.DualEncoder`).
    measures : sequence of str, optional
        ir-measures names (:func:`xenbench.metrics.label_metrics`); default :data:`xenbench.metrics.LABEL_MEASURES`
        and ``Success@k``.

    Returns
    -------
    accuracy : DataFrame
        Long format, one row per (dataset, retriever, cutoff): ``dataset``, ``retriever``, ``n_queries``,
        ``n_items``, ``k`` (1 and ``k``), ``accuracy`` (first-gold accuracy,
        :func:`xenbench.models.linking.accuracy_at_k`: Success@k with one gold item per query), ``seconds``
        (fit + search).
    labels : DataFrame
        One row per (dataset, retriever, measure): ``dataset``, ``retriever``, ``n_queries`` (those with a relevant
        item), ``n_items``, ``measure``, ``value`` (mean over those queries).
    """
    from xenbench.data.sources import load_dataset
    from xenbench.metrics import LABEL_MEASURES, label_metrics
    from xenbench.models.linking import accuracy_at_k, gold_rows

    check_int(k, "k", 1, None, "baseline_metrics", types=PY_INT)
    if measures is None:
        measures = list(dict.fromkeys([*LABEL_MEASURES, f"Success@{k}"]))
    built = _built(retrievers, first_stages, device)
    rows, label_rows = [], []
    for dataset in datasets:
        ds = load_dataset(dataset) if isinstance(dataset, str) else dataset
        queries = sample_queries(ds, max_queries, seed)
        gold = gold_rows(ds, queries)
        grades = ds.grades([q.id for q in queries])
        for name, retriever in built.items():
            start = time.perf_counter()
            _, I = retriever.fit(ds.items).search(queries, max(k, LABEL_DEPTH))
            seconds = time.perf_counter() - start
            log.info("%s on %s: %d queries x %d items in %.1f s", name, ds.name, len(queries), len(ds.items), seconds)
            for cutoff, acc in accuracy_at_k(I[:, :k], gold, sorted({1, k})).items():
                rows.append({"dataset": ds.name, "retriever": name, "n_queries": len(queries),
                             "n_items": len(ds.items), "k": cutoff, "accuracy": acc, "seconds": seconds})
            counted, _ = label_metrics(I, grades, measures[:1], per_query=True)
            for measure, value in label_metrics(I, grades, measures).items():
                label_rows.append({"dataset": ds.name, "retriever": name, "n_queries": int(counted.size),
                                   "n_items": len(ds.items), "measure": measure, "value": value})
    return (pd.DataFrame(rows, columns=["dataset", "retriever", "n_queries", "n_items", "k", "accuracy", "seconds"]),
            pd.DataFrame(label_rows, columns=["dataset", "retriever", "n_queries", "n_items", "measure", "value"]))


def baseline_accuracy(
    datasets: Iterable[Dataset | str],
    *,
    k: int = 64,
    max_queries: int | None = None,
    seed: int = 0,
    retrievers: Mapping[str, Any] | None = None,
    device: Any = "auto",
    first_stages: Sequence[str] = DEFAULT_FIRST_STAGES,
) -> pd.DataFrame:
    """Accuracy@1 and accuracy@k of first-stage retrievers on each dataset (ANNCUR's DE and TF-IDF, and BM25).

    The ``accuracy`` table of :func:`baseline_metrics` (same parameters): a query counts as a hit at ``k`` when its
    first gold item is among the top ``k``.
    """
    check_int(k, "k", 1, None, "baseline_accuracy", types=PY_INT)
    return baseline_metrics(datasets, first_stages=first_stages, k=k, max_queries=max_queries, seed=seed,
                            retrievers=retrievers, device=device, measures=["Success@1"])[0]


def sample_pairs(dataset: Dataset, n_queries: int | None, n_items: int | None, seed: int = 0
                 ) -> tuple[list[Query], list]:
    """A seeded sample of ``n_queries`` queries (with gold) and ``n_items`` items, each in dataset order
    (:func:`xenbench.sampling.sample_rows`: the same items as notebooks 03/04's ``max_items`` under the same seed)."""
    queries = sample_queries(dataset, n_queries, seed)
    check_int(n_items, "n_items", 1, None, "sample_pairs", allow_none=True, types=PY_INT)
    return queries, [dataset.items[i] for i in sample_rows(len(dataset.items), n_items, seed, kind="items")]


def _check_scores(M: object, owner: str) -> np.ndarray:
    return check_array(M, "M", owner, expected="a non-empty float array of shape (n_queries, n_items)",
                       finite_expected="finite (no NaN or inf)")


def center_rows(M: np.ndarray, *, scale: bool = False) -> np.ndarray:
    """Per-query zero-mean scores M − mean_i M[q, i] (ANNCUR Fig. 1(b)), optionally divided by the row std.

    Parameters
    ----------
    M : ndarray of shape (n_queries, n_items)
        Scores.
    scale : bool, default False
        Also divide every row by its standard deviation (z-scores), so that CEs whose scores live on
        different scales can be compared by the *shape* of their distributions. Constant rows stay 0.

    Returns
    -------
    Z : ndarray of shape (n_queries, n_items), float64
    """
    M = _check_scores(M, "center_rows").astype(np.float64)
    Z = M - M.mean(axis=1, keepdims=True)
    if scale:
        std = Z.std(axis=1, keepdims=True)
        Z = np.divide(Z, std, out=np.zeros_like(Z), where=std > 0)
    return Z


def score_skew(M: np.ndarray) -> np.ndarray:
    """Skewness of every query's score distribution over the items (ANNCUR §2.6, Fig. 1(b)).

    ANNCUR describes the [CLS]-CE's scores as "significantly skewed with only a small fraction of
    items getting high scores": a long right tail of each query's scores. This is measured by the
    sample skewness (Fisher-Pearson, g₁ = m₃ / m₂^{3/2}, the biased estimator of
    ``scipy.stats.skew``) of each row; it is invariant to the per-query shift and scale, so the
    zero-mean adjustment of Fig. 1(b) and the CE's score scale do not change it. A symmetric
    distribution gives 0, a right tail > 0.

    Parameters
    ----------
    M : ndarray of shape (n_queries, n_items)
        Scores.

    Returns
    -------
    skew : ndarray of shape (n_queries,), float64
        NaN for a query whose scores are all equal.

    Examples
    --------
    >>> score_skew(np.array([[0.0, 0.0, 0.0, 4.0], [1.0, 2.0, 3.0, 4.0]])).round(3).tolist()
    [1.155, 0.0]
    """
    Z = center_rows(M)
    m2 = (Z ** 2).mean(axis=1)
    m3 = (Z ** 3).mean(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(m2 > 0, m3 / np.where(m2 > 0, m2, 1.0) ** 1.5, np.nan)


def score_summary(matrices: Mapping[str, np.ndarray]) -> pd.DataFrame:
    """Shape of each score matrix (n_queries, n_items): per-query skewness and top-score margin.

    Columns: ``std`` (of the zero-mean scores :func:`center_rows`), ``median_query_skew`` (median over queries
    of :func:`score_skew`, constant rows ignored) and ``median_top1_z`` (median over queries of
    (max − mean) / std of the query's scores). Per-query statistics are summarized by their median everywhere
    (here and in :func:`xenbench.studies.rank.skew_table`): a few near-constant rows do not move it.
    """
    rows = []
    for name, M in matrices.items():
        Z = center_rows(M)
        sd = Z.std(axis=1)
        rows.append({"matrix": name, "shape": tuple(Z.shape), "std": float(Z.std()),
                     "median_query_skew": float(np.nanmedian(score_skew(M))),
                     "median_top1_z": float(np.median(Z.max(axis=1) / np.where(sd > 0, sd, 1.0)))})
    return pd.DataFrame(rows)


def unit_comparison(a: pd.DataFrame, b: pd.DataFrame, *, unit: str, value: str = "recall",
                    confidence: float = 0.95) -> dict[str, Any]:
    """Challenger ``a`` against baseline ``b`` across their independent units: query splits, or the seeds of a run
    whose split is fixed (06, 05's seeded splits).

    Runs that share a unit are not independent: the anchor seeds (first rounds, training draws) inside one query
    split are scored on the same test queries, so counting them as separate runs (15 = 3 splits × 5 seeds) shrinks the
    interval by a factor near √5 for the part of the variance the splits carry. Here each unit's runs are averaged
    first (a method run once per split, deterministic given it, is its own mean), then the units are the replicates:

        d_u = mean_{runs r of a in u} a_r − mean_{runs r of b in u} b_r,  u = 1 … n (units holding both),
        d̄ = Σ_u d_u / n,  s = √(Σ_u (d_u − d̄)² / (n − 1)),
        interval d̄ ± t_{n−1, (1+confidence)/2} · s / √n,
        p = the paired t-test across the unit means (``scipy.stats.ttest_rel`` of a's and b's unit means, the same
        as a one-sample t-test of the d_u against 0 with n − 1 degrees of freedom).

    Parameters
    ----------
    a, b : DataFrame
        One row per run of each method in one cell, columns ``unit`` and ``value``.
    unit : str
        Column naming the independent unit (``"split_seed"``, ``"split"``, ``"seed"``).
    value : str
        The per-run number (a recall, a measure's mean over the run's test queries).
    confidence : float
        Of the interval, in (0, 1).

    Returns
    -------
    dict
        ``mean`` (d̄), ``lo``, ``hi`` (NaN below 2 units), ``p`` (NaN below 2 units or when every d_u is equal),
        ``n_units`` (n) and ``units`` (the d_u, in unit order).

    Examples
    --------
    >>> a = pd.DataFrame({"split": [0, 0, 1, 1, 2, 2], "recall": [0.5, 0.7, 0.6, 0.6, 0.9, 0.7]})
    >>> b = pd.DataFrame({"split": [0, 1, 2], "recall": [0.5, 0.5, 0.6]})
    >>> r = unit_comparison(a, b, unit="split")
    >>> [round(x, 3) for x in r["units"]], round(r["mean"], 3), r["n_units"]
    ([0.1, 0.1, 0.2], 0.133, 3)
    """
    from scipy import stats as sps

    owner = "unit_comparison"
    if not isinstance(confidence, float) or not 0 < confidence < 1:
        raise ParameterError("confidence", "a float in (0, 1)", confidence, owner)
    for name, df in (("a", a), ("b", b)):
        if not isinstance(df, pd.DataFrame) or not {unit, value} <= set(df.columns):
            raise ParameterError(name, f"a DataFrame with columns {unit!r} and {value!r}",
                                 sorted(df.columns) if isinstance(df, pd.DataFrame) else type(df).__name__, owner)
    ma = a.groupby(unit, sort=True)[value].mean()
    mb = b.groupby(unit, sort=True)[value].mean()
    both = ma.index.intersection(mb.index)
    ma, mb = ma.loc[both].to_numpy(np.float64), mb.loc[both].to_numpy(np.float64)
    d = ma - mb
    n = int(d.size)
    if n == 0:
        raise ParameterError("b", f"runs in at least one {unit} that a also ran in", "none in common", owner)
    mean = float(d.mean())
    if n < 2:
        return {"mean": mean, "lo": float("nan"), "hi": float("nan"), "p": float("nan"), "n_units": n,
                "units": d.tolist()}
    half = float(sps.t.ppf(0.5 + confidence / 2, n - 1)) * float(d.std(ddof=1)) / np.sqrt(n)
    p = float(sps.ttest_rel(ma, mb).pvalue) if np.ptp(d) > 0 else float("nan")
    return {"mean": mean, "lo": mean - half, "hi": mean + half, "p": p, "n_units": n, "units": d.tolist()}
