"""``xenbench`` command line: data, training, scoring, notebooks, benchmarks."""
from __future__ import annotations

import argparse
import errno
import json
import logging
import os
import sys
from collections import Counter
from pathlib import Path

from xenbench._io import REPO_ROOT, write_text_atomic
from xenbench.errors import DataError, ParameterError, XenbenchError

#: Longest line of an ``--query-ids``/``--item-ids`` file, in bytes (an id), and the largest such file.
MAX_ID_BYTES = 4096
MAX_IDS_FILE_BYTES = 256 * 2**20


def _data(args: argparse.Namespace) -> None:
    from xenbench.data import wordnet

    if args.data_cmd == "check":
        print(_check_data(args.dataset))
        return
    if args.data_cmd == "build-wordnet":
        table = wordnet.build_wordnet_el(Path(args.wordnet_dir), Path(args.out), args.domain or None)
    else:
        table = wordnet.list_domains()
    print(table.to_string(index=False))


def _check_data(spec: str) -> str:
    """``xenbench data check``: the dataset of ``spec`` opened as every command opens it (a malformed line fails naming
    its file and line; every qrels line must name a loaded query and item) and summarized, without embedding or
    scoring anything: its counts, the first and last ids, how many queries have gold items, and the judged pairs per
    relevance grade (graded qrels: how many pairs each grade has, grade 0 or below being judged not relevant)."""
    from xenbench.data.sources import load_dataset

    ds = load_dataset(spec)

    def ids(rows: list) -> str:
        return f"{rows[0].id!r} ... {rows[-1].id!r}" if len(rows) > 1 else repr(rows[0].id) if rows else "none"

    pairs = sum(len(g) for g in ds.gold.values())
    with_gold = sum(1 for g in ds.gold.values() if g)
    splits = ", ".join(f"{name} {len(q):,}" for name, q in ds.splits.items()) or "none"
    per_grade = Counter(g for judged in ds.qrels.values() for g in judged.values())
    grades = ", ".join(f"grade {g}: {n:,}" for g, n in sorted(per_grade.items(), reverse=True)) or "none"
    not_relevant = sum(n for g, n in per_grade.items() if g <= 0)
    return "\n".join([
        f"{spec}: readable",
        f"  items    {len(ds.items):>9,}  ids {ids(ds.items)}",
        f"  queries  {len(ds.queries):>9,}  ids {ids(ds.queries)}",
        f"  gold     {pairs:>9,}  pairs (query, relevant item) for {with_gold:,} queries, every id resolved",
        f"  grades   {sum(per_grade.values()):>9,}  judged pairs: {grades}",
        f"  grade<=0 {not_relevant:>9,}  pairs judged not relevant (of queries with a relevant item; the others "
        "cannot be evaluated and are left out)",
        f"  splits   {splits}",
    ])


def _check_device(value: str, command: str):
    """``--device`` resolved (:func:`xenbench._device.resolve_device`), or its error in the command's words."""
    from xenbench._device import resolve_device

    try:
        return resolve_device(value, owner=f"xenbench {command}")
    except ParameterError as err:  # same rule, worded with the flag: "The '--device' parameter of xenbench score ..."
        expected = str(err).split(" must be ", 1)[1].rsplit(". Got ", 1)[0]
        raise ParameterError("--device", expected, value, f"xenbench {command}") from None


def _check_domains(domains: list[str], flag: str, command: str) -> None:
    """Every name a bundled WordNet-EL domain (checked before any folder is created or model loaded)."""
    from xenbench.data.sources import wordnet_el_domains

    known = wordnet_el_domains()
    unknown = [d for d in domains if d not in known]
    if unknown:
        raise ParameterError(flag, f"WordNet-EL domains (xenbench data list; e.g. {known[:3]})", unknown[0],
                             f"xenbench {command}")


def _check_output_file(path: str | None, flag: str, command: str) -> None:
    if path is not None and Path(path).is_dir():
        raise ParameterError(flag, "a file path to write (it is a folder)", path, f"xenbench {command}")


def _train_ce(args: argparse.Namespace) -> None:
    from xenbench.data import wordnet
    from xenbench.models import train

    command = "xenbench train-ce"
    # Everything checkable is checked before the output folder exists: a mistake leaves nothing behind.
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise ParameterError("--out", "a folder (new, or a run to resume)", f"{out} (a file)", command)
    _check_device(args.device, "train-ce")
    for flag, names in (("--domains", args.domains or []), ("--dev-domains", args.dev_domains),
                        ("--eval-domains", args.eval_domains)):
        _check_domains(names, flag, "train-ce")
    from xenbench._validation import check_int

    check_int(args.eval_max_queries, "--eval-max-queries", 1, None, command, allow_none=True, expected="an int >= 1")
    domains = args.domains or [d for d in wordnet.list_domains().query("role == 'train'")["domain"]
                                if d not in set(args.dev_domains)]
    cfg = train.TrainConfig(
        kind=args.kind, domains=domains, n_negatives=args.negatives, queries_per_step=args.queries_per_step,
        epochs=args.epochs, max_queries=args.max_queries, lr=args.lr, head_lr=args.head_lr,
        trainable_layers=args.trainable_layers, seed=args.seed, pooling=args.pooling,
        checkpoint_every=args.checkpoint_every,
    )
    train.check_config(cfg, owner=command, names=train.CLI_NAMES)
    ce = train.train_cross_encoder(cfg, args.out, device=args.device)
    if args.eval_domains or args.dev_domains:
        _report_eval(ce, args.dev_domains + args.eval_domains, args.eval_max_queries, Path(args.out) / "eval.json")


def _eval_ce(args: argparse.Namespace) -> None:
    from xenbench._validation import check_int
    from xenbench.models.loading import load_cross_encoder

    _check_device(args.device, "eval-ce")
    _check_domains(args.domains, "--domains", "eval-ce")
    check_int(args.max_queries, "--max-queries", 1, None, "xenbench eval-ce", allow_none=True, expected="an int >= 1")
    _check_output_file(args.out, "--out", "eval-ce")
    ce = load_cross_encoder(args.ce)
    if args.device != "auto":
        ce.to(args.device)
    _report_eval(ce, args.domains, args.max_queries, Path(args.out) if args.out else None)


def _report_eval(ce, domains: list[str], max_queries: int | None, out: Path | None) -> None:
    import torch

    from xenbench.models.train import evaluate_rerank

    if torch.cuda.is_available():
        ce.to("cuda")
    rows = evaluate_rerank(ce, domains, max_queries=max_queries, progress=True)
    text = json.dumps(rows, indent=2)
    print(text)
    if out is not None:
        try:
            write_text_atomic(out, text + "\n")
        except OSError as err:  # a full disk raises from write() with no file name: give it the one written
            if err.filename is None and err.errno is not None:
                raise OSError(err.errno, err.strerror or str(err), str(out)) from err
            raise


def _check_score_args(args: argparse.Namespace) -> None:
    """Every check of ``xenbench score`` that needs neither the dataset nor a model: run first, so a mistake costs
    no DE/CE work and leaves nothing behind."""
    from xenbench._validation import check_float, check_int

    command = "xenbench score"
    _check_store_out(Path(args.out), resume=args.resume, overwrite=args.overwrite)
    dev = _check_device(args.device, "score")
    retriever = args.model in ("de", "tfidf")
    if retriever and args.backend != "local":
        raise ParameterError("--backend", "'local' for de/tfidf (they take seconds; ray is for cross-encoders)",
                             args.backend, command)
    if args.model == "tfidf" and not (args.device == "auto" or dev.type == "cpu"):
        raise ParameterError("--device", "'auto' or 'cpu' for tfidf (scikit-learn runs on the CPU)", args.device,
                             command)
    for flag, value in (("--batch-size", args.batch_size), ("--chunk-pairs", args.chunk_pairs),
                        ("--workers", args.workers)):
        check_int(value, flag, 1, None, command, allow_none=True, expected="an int >= 1")
    check_float(args.gpus_per_worker, "--gpus-per-worker", 0, None, command, allow_none=True, expected="a float >= 0")
    check_int(args.max_length, "--max-length", 1, None, command, allow_none=True, expected="an int >= 1")
    if (retriever or args.model.startswith(("untrained", "bundled-"))) and (args.max_length or args.base):
        flag = "--max-length" if args.max_length else "--base"
        raise ParameterError(flag, "left out for de, tfidf and untrained-* (it applies to a CE folder, .ckpt or hub "
                             "id)", args.max_length or args.base, command)
    if not retriever and not args.model.startswith(("untrained", "bundled-")):
        from xenbench.models.references import resolve_model

        resolve_model(args.model, base=args.base, owner=command)  # a hub id not cached while offline: one line, now
    if args.backend == "ray" and args.address is not None:  # before any model loads: an address that never answers
        from xenbench._ray import check_address

        check_address(args.address)
    check_int(args.seed, "--seed", 0, None, command, expected="a non-negative int")
    from xenbench.data.store import refuse_if_locked

    refuse_if_locked(Path(args.out))  # another `xenbench score` writing this store: refused before the CE loads
    for what, n, path in (("queries", args.n_queries, args.query_ids), ("items", args.n_items, args.item_ids)):
        flag = {"queries": "--query-ids", "items": "--item-ids"}[what]
        if path and n is not None:
            raise ParameterError(f"--n-{what}", f"left out when {flag} is given (choose one)", n, command)
        if path:
            _check_ids_file(Path(path), flag)


def _check_path(path: Path, flag: str) -> None:
    """A path given by ``flag`` and every folder above it: none may be a symbolic link loop or unreadable (each later
    check would otherwise fail far from its cause, or read it as absent)."""
    for p in reversed((path, *path.parents)):  # from the root down: the first bad component is named
        try:
            os.stat(p)
        except (FileNotFoundError, NotADirectoryError):  # absent, or below a file: the caller's checks say which
            continue
        except OSError as err:
            why = "a symbolic link loop" if err.errno == errno.ELOOP else f"not usable ({err.strerror})"
            raise DataError(p, f"is {why}: {flag} expects a path that can be followed") from None


def _check_store_out(out: Path, *, resume: bool, overwrite: bool) -> None:
    """``--out`` of ``xenbench score``: a new or empty folder, or a score store xenbench wrote (resumed, or replaced
    with ``--overwrite``); never a file, a symbolic link loop or another folder (nothing is ever deleted there)."""
    from xenbench.data.store import foreign_content

    _check_path(out, "--out")
    if out.is_symlink() and not out.exists():  # mkdir would fail on it only after the work (the DE's embeddings)
        raise DataError(out, f"is a dangling symbolic link (to {os.readlink(out)}): --out expects a store folder (new, "
                             "or a store to resume); remove the link or make its target")
    parent = next((p for p in (out, *out.parents) if p.exists()), None)
    if parent is not None and parent != out and not parent.is_dir():
        raise DataError(parent, f"is a file, so --out {out} cannot be created below it: choose a store folder")
    if not out.exists():
        if resume:
            raise DataError(out, "no score store to resume (--resume): leave --resume out to start one")
        return
    if not out.is_dir():
        raise DataError(out, "is a file: --out expects a store folder (new, or a store to resume)")
    if not any(out.iterdir()):
        if resume:
            raise DataError(out, "holds no score store to resume (--resume): leave --resume out to start one")
        return
    if not (out / "zarr.json").exists():
        raise DataError(out, "is a non-empty folder that is not a score store: --out expects a new folder or a store "
                             "to resume (nothing there was changed)")
    problem = foreign_content(out)
    if problem is not None:
        raise DataError(out, f"is not a score store xenbench wrote: it {problem}; --out expects a new folder, or a "
                             "store of xenbench to resume or replace (nothing there was changed)")


def _check_ids_file(path: Path, flag: str) -> None:
    if not path.exists():
        raise DataError(path, f"no such file: {flag} expects a file with one id per line")
    if not path.is_file():  # a FIFO would block forever, /dev/zero would never end
        raise DataError(path, f"not a regular file (a folder, FIFO or device): {flag} expects a file with one id per "
                              "line")
    if path.stat().st_size > MAX_IDS_FILE_BYTES:
        raise DataError(path, f"larger than {MAX_IDS_FILE_BYTES // 2**20} MiB: {flag} expects a file with one id per "
                              "line")


def _score(args: argparse.Namespace) -> None:
    from xenbench.data.sources import load_dataset
    from xenbench.models.fingerprint import release_shared

    _check_score_args(args)
    ds = load_dataset(args.dataset)
    q_ids = _ids(args.query_ids, [q.id for q in ds.queries], args.n_queries, args.seed, "queries", ds.name)
    i_ids = _ids(args.item_ids, [i.id for i in ds.items], args.n_items, args.seed, "items", ds.name)
    try:
        if args.model not in ("de", "tfidf") and not args.model.startswith("bundled-"):  # CEs, untrained-* included
            _plan_score(args, ds, q_ids, i_ids)
        if args.model in ("de", "tfidf"):
            from xenbench.models.retrievers import retriever_score_store

            store = retriever_score_store(args.model, ds, args.out, query_ids=q_ids, item_ids=i_ids,
                                          device=args.device, overwrite=args.overwrite)
        else:
            from xenbench.models.jobs import run_score_job

            ray_options = {"address": args.address, "workers": args.workers, "gpus_per_worker": args.gpus_per_worker}
            store = run_score_job(args.model, ds, q_ids, i_ids, args.out, batch_size=args.batch_size,
                                  device=args.device, precision=args.precision, chunk_pairs=args.chunk_pairs,
                                  seed=args.seed, backend=args.backend, ray_options=ray_options,
                                  overwrite=args.overwrite, base=args.base, max_length=args.max_length)
    finally:
        release_shared()  # the CE the plan loaded for the job (load_shared), whether or not the job ran
    print(store)


def _plan_score(args: argparse.Namespace, ds, q_ids: list[str] | None, i_ids: list[str] | None) -> None:
    """Log what ``xenbench score`` is about to do before it starts, as ``xenbench run`` does: the pairs left to score
    and how long they take, as a range, at the rates the CE reaches here on a few hundred of them
    (:func:`xenbench.models.probe.probe_rate`, with the job's device, precision and batch size); a CE whose probe scores
    are NaN or inf is refused; one that does not read the query on the probe's pairs is warned about
    (:func:`xenbench.harness.preflight.check_probe`). ``untrained-*`` is built here as the job builds it (same seed)."""
    import contextlib

    from xenbench.harness.preflight import ce_name, check_probe, quiet_transformers
    from xenbench.models.fingerprint import load_shared
    from xenbench.models.probe import degenerate_scores, nonfinite_scores, probe_rate, scoring_line

    log = logging.getLogger("xenbench.cli")
    queries = [ds.queries[ds.query_index[q]] for q in q_ids] if q_ids is not None else ds.queries
    items = [ds.items[ds.item_index[i]] for i in i_ids] if i_ids is not None else ds.items
    todo = 1.0
    out = Path(args.out)
    if (out / "zarr.json").is_file() and not args.overwrite:  # a resume: only the missing blocks are left
        from xenbench.data.store import ScoreStore

        with contextlib.suppress(XenbenchError, OSError, KeyError):  # another job's store is refused by the scorer
            store = ScoreStore.open(out)
            todo = len(store.missing_chunks()) / max(store.n_chunks, 1)
    pairs = int(round(len(queries) * len(items) * todo))
    if pairs == 0:
        return
    if args.model.startswith("untrained"):
        import warnings

        from xenbench.models.loading import UNTRAINED, untrained_cross_encoder

        if args.model not in UNTRAINED:
            return  # run_score_job refuses the name
        with warnings.catch_warnings():  # the job warns once that its scores are meaningless
            warnings.simplefilter("ignore", UserWarning)
            name, ce = args.model, untrained_cross_encoder(args.model, args.seed)
    else:
        name = ce_name(args.model)
        with quiet_transformers():  # a load's bar would only stand between the command and its plan
            # run_score_job scores with this same object (load_shared): the CE loads, and its weights are hashed, once
            ce = load_shared(args.model, args.max_length, base=args.base)
    probe = probe_rate(ce, queries, items, seed=args.seed, device=args.device, precision=args.precision,
                       batch_size=args.batch_size, relevant=ds.gold)
    broken = nonfinite_scores(probe.scores, name)
    if broken:
        raise ParameterError("MODEL", broken, args.model, "xenbench score")
    warning = degenerate_scores(probe.scores, name) or check_probe(probe, ds.gold, queries, items, name)
    if warning:
        log.warning(warning)
    left = " (the blocks left of the store at --out)" if todo < 1 else ""
    log.info("%s%s", scoring_line(name, len(queries), len(items), pairs, probe), left)


def _read_ids(path: Path, known: list[str], what: str, dataset: str) -> list[str]:
    """The ids of an ids file, one per line, read line by line: each one of ``known`` (the dataset's), at most once,
    and at most :data:`MAX_ID_BYTES` per line, so the file is never read further than the dataset is long."""
    known_set = set(known)
    ids: list[str] = []
    first: dict[str, int] = {}
    with open(path, "rb") as handle:
        lineno = 0
        while raw := handle.readline(MAX_ID_BYTES + 1):
            lineno += 1
            if len(raw) > MAX_ID_BYTES and not raw.endswith(b"\n"):
                raise DataError(path, f"line longer than {MAX_ID_BYTES} bytes: expected one id per line", lineno)
            if lineno == 1:
                raw = raw.removeprefix(b"\xef\xbb\xbf")  # a UTF-8 byte order mark
            try:
                line = raw.decode("utf-8").strip()
            except UnicodeDecodeError as err:
                raise DataError(path, f"not valid UTF-8 ({err.reason} at byte {err.start})", lineno) from None
            if not line:
                continue
            if line in first:
                raise DataError(path, f"duplicate id {line!r} (first on line {first[line]}); "
                                      "each id is one row/column of the matrix", lineno)
            if line not in known_set:
                raise DataError(path, f"unknown id {line!r}: not one of the {len(known)} {what} of {dataset}", lineno)
            first[line] = lineno
            ids.append(line)
    return ids


def _ids(path: str | None, all_ids: list[str], n: int | None, seed: int, what: str, dataset: str) -> list[str] | None:
    """Ids from a file (one per line), or a seeded sample of ``n`` in dataset order, or all (None)."""
    if path and n is not None:
        flag = {"queries": "--query-ids", "items": "--item-ids"}[what]
        raise ParameterError(f"--n-{what}", f"left out when {flag} is given (choose one)", n, "xenbench score")
    if path:
        ids = _read_ids(Path(path), all_ids, what, dataset)
        if not ids:
            raise DataError(path, "no ids: expected one id per line")
        return ids
    if n is None:
        return None
    if n < 1 or n > len(all_ids):
        raise ParameterError(f"--n-{what}", f"an int in [1, {len(all_ids)}] (the {what} of {dataset})", n,
                             "xenbench score")
    if n == len(all_ids):
        return None
    from xenbench.sampling import sample_rows

    return [all_ids[k] for k in sample_rows(len(all_ids), n, seed, kind=what)]


def _run(args: argparse.Namespace) -> None:
    from xenbench._io import REPO_ROOT
    from xenbench.harness import list_notebooks, load_spec, notebook_path, parse_cli_params, run_notebook

    names = list_notebooks() if args.notebook == "all" else [args.notebook]
    for name in names:
        notebook_path(name)  # an unknown name fails here, listing the notebooks
        params = parse_cli_params(load_spec(name), args.param)
        out = run_notebook(name, profile=args.profile, params=params, out_dir=Path(args.out or REPO_ROOT / "reports"),
                           html=not args.no_html, self_contained=not args.shared_plotly, log_output=args.log_output,
                           timeout=args.timeout, fit=args.fit)
        print(out)


def _sweep(args: argparse.Namespace) -> None:
    from xenbench.sweep import run_sweep

    values = {p[0]: p[1:] for p in args.param}
    table = run_sweep(args.notebook, values, profile=args.profile, out_dir=args.out, backend=args.backend,
                      jobs=args.jobs, address=args.address, timeout=args.timeout)
    print(f"{table['point'].nunique()} points with results, {len(table)} rows")


def _notebooks(args: argparse.Namespace) -> int:
    """``xenbench notebooks normalize``: the tracked notebooks in the form JupyterLab's saves keep
    (:func:`xenbench.harness.lab.normalize_files`); ``--check`` only lists those not in it (exit 1)."""
    from xenbench.harness.lab import normalize_files

    changed = normalize_files(args.paths or None, write=not args.check)
    for path in changed:
        print(f"{'not normalized' if args.check else 'normalized'}: {path}")
    return 1 if args.check and changed else 0


def _findings(args: argparse.Namespace) -> int:
    from xenbench._io import REPO_ROOT
    from xenbench.studies import findings

    results_dir = Path(args.results_dir) if args.results_dir else findings.RESULTS_DIR
    if args.migrate:
        from xenbench.studies.records import migrate_file

        for path in sorted(results_dir.glob("*.results.json")):
            if migrate_file(path):
                print(f"{path}: migrated to the one record schema (xenbench.studies.records.RunRecord)")
        return 0
    if args.verify:
        from xenbench.studies import witnesses

        from xenbench._validation import check_int

        jobs = check_int(args.jobs, "--jobs", 1, None, "xenbench findings", allow_none=True, expected="an int >= 1")
        found = witnesses.verify(results_dir, log=lambda line: print(line, file=sys.stderr),
                                 jobs=witnesses.default_jobs() if jobs is None else jobs)
        for line in witnesses.describe(found):
            print(f"xenbench: error: {line}", file=sys.stderr)
        n_bad = sum(not w.ok for w in found)
        kinds = ", ".join(f"{sum(w.source == s for w in found)} {s}" for s in witnesses.SOURCES)
        print(f"{len(found) - n_bad} of {len(found)} witnesses of {results_dir} hold with today's code and inputs "
              f"({kinds})" + (f"; {n_bad} do not: re-run those notebooks" if n_bad else ""))
        return 1 if n_bad else 0
    if args.write:
        for b, changed in findings.write_docs(results_dir):
            print(f"{b.path}: {b.what} {'rewritten' if changed else 'already up to date'}")
    elif args.check:
        blocks = findings.write_docs(results_dir, write=False)
        stale = [b for b, changed in blocks if changed]
        if stale:
            raise XenbenchError("; ".join(f"{b.path}: the {b.what} disagrees with {b.source}" for b in stale)
                                + "; run `xenbench findings --write`")
        for b, _ in blocks:
            print(f"{b.path}: {b.what} agrees with {b.source}")
    else:
        from xenbench.studies.findings.claims import claims_table

        section = findings.findings_section(results_dir)  # first: it names a bad file by its name
        print(claims_table(results_dir) + "\n\n" + section)
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="xenbench", description=__doc__)
    p.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = p.add_subparsers(dest="cmd", required=True)

    d = sub.add_parser("data", help="bundled data")
    dsub = d.add_subparsers(dest="data_cmd", required=True)
    b = dsub.add_parser("build-wordnet", help="regenerate WordNet-EL from the WordNet 3.0 files")
    b.add_argument("--wordnet-dir", default="/usr/share/wordnet")
    b.add_argument("--out", default=str(REPO_ROOT / "data" / "wordnet-el"))
    b.add_argument("--domain", action="append", help="build only this domain (repeatable)")
    dsub.add_parser("list", help="list the bundled WordNet-EL domains")
    c = dsub.add_parser("check", help="open a dataset as every command does and print its counts and ids (seconds: "
                                      "nothing is embedded or scored)")
    c.add_argument("dataset", help="wordnet-el:<domain>, beir:<folder> or zeshel:<root>:<world>")
    d.set_defaults(func=_data)

    t = sub.add_parser("train-ce", help="train a [CLS]-CE or [EMB]-CE on WordNet-EL training domains")
    t.add_argument("--kind", choices=["cls", "emb"], required=True)
    t.add_argument("--out", required=True, help="output folder (resumes if a run is there)")
    t.add_argument("--domains", nargs="*", help="training domains (default: every role=train domain)")
    t.add_argument("--dev-domains", nargs="*", default=[], help="excluded from training, evaluated after")
    t.add_argument("--eval-domains", nargs="*", default=[], help="evaluated after training")
    t.add_argument("--eval-max-queries", type=int, default=None)
    t.add_argument("--negatives", type=int, default=15)
    t.add_argument("--queries-per-step", type=int, default=8)
    t.add_argument("--epochs", type=int, default=2)
    t.add_argument("--max-queries", type=int, default=None)
    t.add_argument("--lr", type=float, default=1e-4)
    t.add_argument("--head-lr", type=float, default=1e-3)
    t.add_argument("--trainable-layers", type=int, default=6)
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--pooling", choices=["mean", "markers"], default="mean",
                   help="[EMB]-CE layout: mean (20 * cosine of segment means) or markers (ANNCUR's raw dot of the"
                        " [unused0]/[unused1] mean and [unused2])")
    t.add_argument("--checkpoint-every", type=int, default=200, help="steps between resume states")
    t.add_argument("--device", default="auto")
    t.set_defaults(func=_train_ce)

    s = sub.add_parser("score", help="dense query x item score matrix into a resumable on-disk store")
    s.add_argument("model", help="a CE folder (models/cls-ce), a Hugging Face hub id (org/name[@revision]; from "
                                 "the local cache when HF_HUB_OFFLINE=1), a .ckpt with --base, de / tfidf, or "
                                 "untrained-cls / untrained-emb (a random head: for testing the pipeline only)")
    s.add_argument("dataset", help="wordnet-el:<domain>, beir:<folder> or zeshel:<root>:<world>")
    s.add_argument("--out", required=True, help="store folder: new, or a store of the same job, which is resumed")
    again = s.add_mutually_exclusive_group()
    again.add_argument("--resume", action="store_true",
                       help="require a store at --out and finish it (refused if there is none)")
    again.add_argument("--overwrite", action="store_true",
                       help="replace the store at --out (of this job or another); only a score store is ever deleted")
    s.add_argument("--n-queries", type=int, default=None, help="seeded sample of queries (default all)")
    s.add_argument("--n-items", type=int, default=None, help="seeded sample of items (default all)")
    s.add_argument("--query-ids", default=None, help="file with one query id per line")
    s.add_argument("--item-ids", default=None, help="file with one item id per line")
    s.add_argument("--batch-size", type=int, default=None,
                   help="pairs per forward pass (default: the store's when resuming, else by device)")
    s.add_argument("--chunk-pairs", type=int, default=None,
                   help="pairs per resumable block (default about 65,536; smaller loses less work to a kill)")
    s.add_argument("--device", default="auto")
    s.add_argument("--precision", choices=["fp32", "bf16", "fp16", "bf16-weights"], default="fp32",
                   help="fp32 is exact; bf16/fp16 autocast; bf16-weights runs a bf16 copy of the weights "
                        "(about 1e-2 relative noise; see make bench for speed and error)")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--max-length", type=int, default=None,
                   help="tokens per pair, as sentence-transformers' max_length (default: the model's); refused above "
                        "the model's position limit")
    s.add_argument("--base", default=None, help="the base model (folder or hub id) of a Lightning .ckpt")
    s.add_argument("--backend", choices=["local", "ray"], default="local",
                   help="ray: row blocks as tasks on actors holding the model (pip install xenbench[ray])")
    s.add_argument("--address", default=None, help="Ray cluster address (e.g. auto); default a local Ray")
    s.add_argument("--workers", type=int, default=None, help="Ray actors (default one per GPU, or per CPU)")
    s.add_argument("--gpus-per-worker", type=float, default=None, help="GPUs per actor (default 1 on CUDA, else 0)")
    s.set_defaults(func=_score)

    r = sub.add_parser("run", help="execute a notebook with papermill into reports/ (+ HTML)")
    r.add_argument("notebook", help="a name such as 00_data, a path, or 'all'")
    r.add_argument("-p", "--param", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"))
    r.add_argument("--profile", default="quick", help="parameter profile from notebooks/<name>.yaml: quick (default), full, ...")
    r.add_argument("--out", default=None, help="output folder (default: <repo>/reports)")
    r.add_argument("--no-html", action="store_true")
    r.add_argument("--shared-plotly", action="store_true",
                   help="one plotly-<version>.min.js beside the HTML reports instead of inside each (4.6 MB less per "
                        "report; a report copied without that file draws no figures)")
    r.add_argument("--log-output", action="store_true",
                   help="also echo what the cells print (the kernel's stdout); its stderr (progress bars, log lines, "
                        "each warning once) is shown anyway")
    r.add_argument("--timeout", type=int, default=1200,
                   help="seconds a cell may run (default 1200; the full profiles need more on a small CPU)")
    r.add_argument("--fit", action="store_true",
                   help="with -p model (03, 04, 07): choose max_queries and max_items so that scoring fits the cell "
                        "timeout at the rate measured here, keeping at least 10 test queries (with labels) per split")
    r.set_defaults(func=_run)

    w = sub.add_parser("sweep", help="run a notebook over a parameter grid; one tidy table + HTML summary")
    w.add_argument("notebook", help="a notebook name such as 05_pefa_lambda")
    w.add_argument("-p", "--param", nargs="+", action="append", default=[], metavar="NAME V",
                   help="a swept parameter and its values: -p NAME V1 V2 ... (repeatable: the grid is their product)")
    w.add_argument("--profile", default="quick", help="profile of the other parameters (default quick)")
    w.add_argument("--backend", choices=["local", "ray"], default="local")
    w.add_argument("--jobs", type=int, default=1, help="points run at once (local processes, or a local Ray's CPUs)")
    w.add_argument("--address", default=None, help="Ray cluster address (e.g. auto); default a local Ray")
    w.add_argument("--out", default=None, help="output folder (default reports/sweeps/<notebook>.<profile>)")
    w.add_argument("--timeout", type=int, default=1200, help="seconds per cell")
    w.set_defaults(func=_sweep)

    f = sub.add_parser("findings", help="conclusions generated from the committed results (README.md's claims table, "
                                        "docs/FINDINGS.md, docs/MODELS.md)")
    f.add_argument("--results-dir", default=None, help="folder of <name>.full.results.json (default notebooks/results)")
    mode = f.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true",
                      help="rewrite the generated blocks: README.md's claims table, docs/FINDINGS.md's findings and "
                           "docs/MODELS.md's bundled-CE tables")
    mode.add_argument("--check", action="store_true", help="exit 2 if a generated block is stale")
    mode.add_argument("--verify", action="store_true",
                      help="check the committed results: each recorded input digest against the checkout, every "
                           "summary re-derived from the file's own records, and each notebook's witness cells recomputed "
                           "from the stores with today's code; exit 1 naming every cell that no longer matches "
                           "(xenbench.studies.witnesses)")
    f.add_argument("--jobs", type=int, default=None,
                   help="with --verify: results files checked at once, one process each (default: the cores here)")
    mode.add_argument("--migrate", action="store_true",
                      help="rewrite the results files of notebooks 03, 04 and 07 written under older record schemas "
                           "into the one schema (xenbench.studies.records.migrate_results): renames only, no number "
                           "changes, the results digest bound again after checking it held; re-runnable")
    f.set_defaults(func=_findings)

    n = sub.add_parser("notebooks", help="the tracked notebooks in the normalized form JupyterLab's saves keep")
    nsub = n.add_subparsers(dest="notebooks_cmd", required=True)
    norm = nsub.add_parser("normalize", help="rewrite notebooks without outputs, execution counts or view metadata, "
                                             "as the Jupyter server writes them (default: every notebook in notebooks/)")
    norm.add_argument("paths", nargs="*", help="notebook files (default: notebooks/*.ipynb)")
    norm.add_argument("--check", action="store_true", help="write nothing; list the files not normalized, exit 1 if any")
    n.set_defaults(func=_notebooks)

    e = sub.add_parser("eval-ce", help="accuracy@1 of a CE re-ranking the DE's top-64 on WordNet-EL domains")
    e.add_argument("ce", help="cross-encoder folder")
    e.add_argument("--domains", nargs="+", required=True)
    e.add_argument("--max-queries", type=int, default=None)
    e.add_argument("--device", default="auto")
    e.add_argument("--out", default=None, help="write the table as JSON here")
    e.set_defaults(func=_eval_ce)
    return p


_SWEEP_OPTIONS = {"-p", "--param", "--profile", "--backend", "--jobs", "--address", "--out", "--timeout", "-h",
                  "--help"}


def _split_params(argv: list[str]) -> tuple[list[str], list[list[str]]]:
    """Take ``-p NAME VALUE`` (``xenbench sweep``: ``-p NAME V1 V2 ...``) out of ``argv`` before argparse,
    which would read a value such as ``-0.5,0.5`` as an option."""
    sweep = "sweep" in argv[:2]
    rest, params, k = [], [], 0
    while k < len(argv):
        if argv[k] in ("-p", "--param") and len(argv) - k >= 3:
            if sweep:  # every value up to the next option of `xenbench sweep`
                end = k + 2
                while end < len(argv) and argv[end] not in _SWEEP_OPTIONS:
                    end += 1
                params.append(argv[k + 1 : end])
                k = end
            else:
                params.append([argv[k + 1], argv[k + 2]])
                k += 3
        else:
            rest.append(argv[k])
            k += 1
    return rest, params


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    argv, params = _split_params(argv)
    args = build_parser().parse_args(argv)
    if params:
        if args.cmd not in ("run", "sweep"):
            build_parser().error("-p/--param belongs to `xenbench run` and `xenbench sweep`")
        args.param = params
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if args.cmd in ("run", "sweep", "score"):  # what a run will cost (pairs to score, their time) is worth a line unasked
        for name in ("xenbench.harness", "xenbench.cli"):
            logging.getLogger(name).setLevel(logging.DEBUG if args.verbose else logging.INFO)
    # Ctrl-C reaches the kernel too: papermill's "Kernel died" line would precede xenbench's own one-line message.
    logging.getLogger("papermill").addFilter(lambda record: "Kernel died" not in record.getMessage())
    try:
        rc = args.func(args)
    except KeyboardInterrupt as err:  # Ctrl-C: one line saying what was kept (a run's partial notebook), no traceback
        logging.disable(logging.CRITICAL)  # the interrupted kernel's client logs its dead tasks as it is torn down
        notes = " ".join(getattr(err, "__notes__", ()))
        print(f"xenbench: interrupted{': ' + notes[:1].lower() + notes[1:] if notes else ''}", file=sys.stderr)
        return 130
    except XenbenchError as err:
        print(f"xenbench: error: {err}", file=sys.stderr)
        return 2
    except OSError as err:  # an unwritable or impossible output path, a full disk: one line, not a traceback
        where = f"{err.filename}: " if err.filename else ""
        print(f"xenbench: error: {where}{err.strerror or err}", file=sys.stderr)
        return 2
    return rc if isinstance(rc, int) else 0


if __name__ == "__main__":
    sys.exit(main())
