"""Malformed inputs, table-driven: each gives one clear line on stderr naming the file, line or parameter,
a non-zero exit, and leaves nothing behind.

Every case runs the command line in-process (``xenbench.cli.main``): the error is what a user sees. A case's
``never`` names the expensive steps it must fail before (loading the dataset, the DE, a CE, training): they are
replaced by stand-ins that fail the test if entered, so "checked before any work" is asserted without timing.
"""
from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from xenbench.cli import main

# --- a tiny BEIR folder and a tiny ZESHEL root, written fresh for every case ---------------------------

CORPUS = [{"_id": f"d{k}", "title": f"title {k}", "text": f"text of item {k}"} for k in range(4)]
QUERIES = [{"_id": f"q{k}", "text": f"query number {k}"} for k in range(3)]
QRELS = "query-id\tcorpus-id\tscore\n" + "".join(f"q{k}\td{k}\t1\n" for k in range(3))


def _jsonl(rows) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


def beir(root: Path, corpus=None, queries=None, qrels=None) -> Path:
    folder = root / "beir"
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text(_jsonl(CORPUS) if corpus is None else corpus, encoding="utf-8")
    (folder / "queries.jsonl").write_text(_jsonl(QUERIES) if queries is None else queries, encoding="utf-8")
    if qrels is not False:
        (folder / "qrels" / "test.tsv").write_text(QRELS if qrels is None else qrels, encoding="utf-8")
    return folder


DOCS = [{"document_id": "c1", "title": "Ctx", "text": "a b c d e"},
        {"document_id": "L1", "title": "Bee", "text": "the letter b"}]


def mention(**over) -> dict:
    base = {"mention_id": "m1", "context_document_id": "c1", "corpus": "w", "start_index": 1, "end_index": 2,
            "text": "b c", "label_document_id": "L1"}
    return {**base, **over}


def zeshel(root: Path, mentions=None, split="test") -> Path:
    folder = root / "zeshel"
    (folder / "documents").mkdir(parents=True)
    (folder / "mentions").mkdir()
    (folder / "documents" / "w.json").write_text(_jsonl(DOCS), encoding="utf-8")
    if mentions is not False:
        (folder / "mentions" / f"{split}.json").write_text(_jsonl(mentions or [mention()]), encoding="utf-8")
    return folder


def _bytes(folder: Path, name: str, data: bytes) -> Path:
    (folder / name).write_bytes(data)
    return folder


@dataclass
class Case:
    id: str
    args: Callable[[Path], list[str]]  # the command line, given the case's folder
    match: str  # regex the single stderr line must match
    never: tuple[str, ...] = ()  # keys of EXPENSIVE that must not be entered


# The expensive steps, as (module, attribute) pairs replaced by a stand-in that fails the test when called.
EXPENSIVE = {
    "dataset": [("xenbench.data.sources", "load_dataset")],
    "de": [("xenbench.models.retrievers", "DualEncoder"), ("xenbench.models.retrievers", "TfidfRetriever")],
    "ce": [("xenbench.models.loading", "load_cross_encoder"), ("xenbench.models.jobs", "load_shared"),
           ("xenbench.models.jobs", "untrained_cross_encoder")],
    "train": [("xenbench.models.train", "train_cross_encoder")],
    "mining": [("xenbench.models.train", "mine_training_data"), ("xenbench.models.train", "build_cross_encoder")],
}
BEFORE_WORK = ("dataset", "de", "ce")


def score_beir(**files) -> Callable[[Path], list[str]]:
    return lambda tmp: ["score", "de", f"beir:{beir(tmp, **files)}", "--out", str(tmp / "out")]


def score_zeshel(spec_tail: str = ":w", **kw) -> Callable[[Path], list[str]]:
    return lambda tmp: ["score", "de", f"zeshel:{zeshel(tmp, **kw)}{spec_tail}", "--out", str(tmp / "out")]


def score_args(*extra: str, ids: dict[str, str] | None = None) -> Callable[[Path], list[str]]:
    def build(tmp: Path) -> list[str]:
        args = ["score", "de", f"beir:{beir(tmp)}", "--out", str(tmp / "out"), *extra]
        for flag, text in (ids or {}).items():
            (tmp / f"{flag}.txt").write_text(text, encoding="utf-8")
            args += [f"--{flag}", str(tmp / f"{flag}.txt")]
        return args
    return build


def raw(*args: str) -> Callable[[Path], list[str]]:
    return lambda tmp: [a.replace("{tmp}", str(tmp)) for a in args]


MODELS = Path(__file__).resolve().parent.parent / "models"


def model_copy(tmp: Path, damage: Callable[[Path], None]) -> Path:
    """A copy of the bundled [CLS]-CE folder, damaged by ``damage(folder)``."""
    import shutil

    folder = tmp / "ce"
    shutil.copytree(MODELS / "cls-ce", folder)
    damage(folder)
    return folder


def _zero_middle(folder: Path) -> None:  # 64 KiB of zeros in the middle: still parses, scores differ
    path = folder / "trained.safetensors"
    data = bytearray(path.read_bytes())
    mid = len(data) // 2
    data[mid : mid + 65536] = bytes(65536)
    path.write_bytes(bytes(data))


def _random_bytes(folder: Path) -> None:
    import numpy as np

    path = folder / "trained.safetensors"
    path.write_bytes(np.random.default_rng(0).bytes(path.stat().st_size))


def _truncate(folder: Path) -> None:
    path = folder / "trained.safetensors"
    path.write_bytes(path.read_bytes()[:1000])


def score_model(damage: Callable[[Path], None]) -> Callable[[Path], list[str]]:
    return lambda tmp: ["score", str(model_copy(tmp, damage)), f"beir:{beir(tmp)}", "--out", str(tmp / "out")]


def _unlinked(folder: Path, name: str) -> Path:
    (folder / name).unlink()
    return folder


BAD_QUERY = b'{"_id": "q\xff", "text": "x"}\n'
BAD_QRELS = QRELS.encode() + b"q0\td\xe90\t1\n"
BAD_UTF8 = json.dumps({"_id": "d0", "title": "t", "text": "x"}).encode() + b"\n" + b'{"_id": "d1", "text": "caf\xe9"}\n'

def _fifo(path: Path) -> Path:
    import os

    os.mkfifo(path)
    return path


def _loop(tmp: Path) -> Path:
    """``loop/a`` and ``loop/b``: two symbolic links to each other."""
    (tmp / "loop").mkdir()
    (tmp / "loop" / "a").symlink_to(tmp / "loop" / "b")
    (tmp / "loop" / "b").symlink_to(tmp / "loop" / "a")
    return tmp / "loop"


def _foreign_zarr(folder: Path) -> Path:
    """A zarr group of the user's own, with a file of theirs in it."""
    import zarr

    zarr.open_group(str(folder), mode="w", attributes={"project": "mine"}).create_array("x", shape=(2,), dtype="i4")
    (folder / "notes.txt").write_text("mine", encoding="utf-8")
    return folder


def _planted_state(folder: Path) -> Path:
    """A ``train_state.pt`` whose unpickling would create ``PWNED`` beside it (``builtins.open(..., "w")``)."""
    import torch

    class Planted:
        def __reduce__(self):
            return (open, (str(folder / "PWNED"), "w"))

    folder.mkdir()
    torch.save({"model": Planted(), "step": 1}, folder / "train_state.pt")
    return folder


def _results_with_nan(tmp: Path) -> Path:
    """The committed results, with one integer field (a CE-call budget of 04) replaced by NaN."""
    import shutil

    folder = tmp / "results"
    shutil.copytree(Path(__file__).resolve().parent.parent / "notebooks" / "results", folder)
    path = folder / "04_axn_lambda.full.results.json"
    doc = json.loads(path.read_text())
    doc["results"]["comparisons"][12]["budget"] = float("nan")
    path.write_text(json.dumps(doc))
    return folder


def _one_results(tmp: Path, edit: Callable[[dict], None] | None = None, name: str = "00_data.full.results.json",
                 replace: Callable[[Path], None] | None = None) -> Path:
    """A results folder holding one committed results file, edited by ``edit(doc)`` or replaced by ``replace(path)``."""
    folder = tmp / "results"
    folder.mkdir()
    path = folder / name
    doc = json.loads((Path(__file__).resolve().parent.parent / "notebooks" / "results" / name).read_text())
    if edit is not None:
        edit(doc)
    path.write_text(json.dumps(doc))
    if replace is not None:
        path.unlink()
        replace(path)
    return folder


def _findings(*extra: str, **kw) -> Callable[[Path], list[str]]:
    return lambda tmp: ["findings", *extra, "--results-dir", str(_one_results(tmp, **kw))]


def _set_field(*keys, value):
    def edit(doc):
        for key in keys[:-1]:
            doc = doc[key]
        doc[keys[-1]] = value
    return edit


def train_args(*extra: str) -> Callable[[Path], list[str]]:
    return lambda tmp: ["train-ce", "--kind", "emb", "--out", str(tmp / "run"), "--domains", "noun.Tops", *extra]


LONG_LINE = _jsonl(CORPUS) + json.dumps({"_id": "d9", "text": "x" * (4 * 2**20 + 10)}) + "\n"

HARDENING = [
    # --- score --out: refused before the dataset or any model is loaded
    Case("out-is-a-file", lambda t: ["score", "de", f"beir:{beir(t)}", "--out",
                                     str((t / "afile").write_text("x") and t / "afile")],
         r"afile: is a file: --out expects a store folder", BEFORE_WORK),
    Case("out-unrelated-folder", lambda t: ["score", "de", f"beir:{beir(t)}", "--out",
                                            str((t / "notes").mkdir() or (t / "notes" / "a.txt").write_text("x")
                                                and t / "notes")],
         r"notes: is a non-empty folder that is not a score store: --out expects a new folder", BEFORE_WORK),
    Case("out-unrelated-folder-overwrite", lambda t: ["score", "tfidf", f"beir:{beir(t)}", "--overwrite", "--out",
                                                      str((t / "notes").mkdir() or (t / "notes" / "a.txt").write_text("x")
                                                          and t / "notes")],
         r"notes: is a non-empty folder that is not a score store", BEFORE_WORK),
    Case("resume-without-store", score_args("--resume"), r"out: no score store to resume \(--resume\)", BEFORE_WORK),
    Case("out-symlink-loop", lambda t: ["score", "untrained-cls", f"beir:{beir(t)}", "--out", str(_loop(t) / "a")],
         r"loop/a: is a symbolic link loop: --out expects a path that can be followed", BEFORE_WORK),
    Case("out-below-symlink-loop", lambda t: ["score", "de", f"beir:{beir(t)}", "--out", str(_loop(t) / "a" / "s")],
         r"loop/a: is a symbolic link loop: --out expects a path that can be followed", BEFORE_WORK),
    Case("overwrite-foreign-zarr-group", lambda t: ["score", "untrained-cls", f"beir:{beir(t)}", "--overwrite",
                                                    "--out", str(_foreign_zarr(t / "mine"))],
         r"mine: is not a score store xenbench wrote: it holds a zarr group that xenbench did not write",
         BEFORE_WORK),
    Case("ray-address-refused", lambda t: ["score", "untrained-cls", f"beir:{beir(t)}", "--out", str(t / "out"),
                                           "--backend", "ray", "--address", "127.0.0.1:1"],
         r"The 'address' parameter of Ray must be the address of a running Ray cluster that answers within 60 s \(a "
         r"TCP connection to it failed: Connection refused", BEFORE_WORK),
    # --- score --device: checked for every model kind before anything loads
    Case("device-malformed-de", score_args("--device", "gpu0;rm"),
         r"'--device' parameter of xenbench score must be 'auto', 'cpu', 'cuda', 'cuda:<k>' or 'mps'\. Got 'gpu0;rm'",
         BEFORE_WORK),
    Case("device-malformed-tfidf", lambda t: ["score", "tfidf", f"beir:{beir(t)}", "--out", str(t / "out"),
                                              "--device", "tpu9"],
         r"'--device' parameter of xenbench score must be 'auto', 'cpu', .* Got 'tpu9'", BEFORE_WORK),
    Case("device-malformed-ce", lambda t: ["score", "untrained-cls", f"beir:{beir(t)}", "--out", str(t / "out"),
                                           "--device", "cuda:x"],
         r"'--device' parameter of xenbench score must be .* Got 'cuda:x'", BEFORE_WORK),
    Case("workers-zero", lambda t: ["score", "untrained-cls", f"beir:{beir(t)}", "--out", str(t / "out"),
                                    "--workers", "0"], r"'--workers' parameter of xenbench score must be an int >= 1",
         BEFORE_WORK),
    # --- ids files: regular files only, read line by line
    Case("ids-fifo", lambda t: [*score_args()(t), "--item-ids", str(_fifo(t / "ids"))],
         r"ids: not a regular file \(a folder, FIFO or device\): --item-ids expects a file", BEFORE_WORK),
    Case("ids-dev-zero", score_args("--query-ids", "/dev/zero"),
         r"/dev/zero: not a regular file \(a folder, FIFO or device\): --query-ids", BEFORE_WORK),
    Case("ids-long-line", score_args(ids={"query-ids": "q0\n" + "q" * 5000 + "\n"}),
         r"query-ids\.txt:2: line longer than 4096 bytes: expected one id per line", ("de", "ce")),
    # --- bounded and well-formed texts
    Case("corpus-line-too-long", score_beir(corpus=LONG_LINE),
         r"corpus\.jsonl:5: line longer than 4,194,304 bytes", ("de", "ce")),
    Case("corpus-fifo", lambda t: ["score", "de", f"beir:{_fifo(_unlinked(beir(t), 'corpus.jsonl') / 'corpus.jsonl').parent}",
                                   "--out", str(t / "out")],
         r"corpus\.jsonl: not a regular file \(a folder, FIFO or device\)", ("de", "ce")),
    Case("corpus-lone-surrogate", score_beir(corpus='{"_id": "d0", "text": "caf\\ud800e"}\n'),
         r"corpus\.jsonl:1: field 'text' holds a lone surrogate '\\ud800' at character 4", ("de", "ce")),
    Case("queries-lone-surrogate-id", score_beir(queries='{"_id": "q\\udc00", "text": "x"}\n'),
         r"queries\.jsonl:1: field '_id' holds a lone surrogate", ("de", "ce")),
    Case("queries-empty-text", score_beir(queries=_jsonl([QUERIES[0], {"_id": "q1", "text": " \t "}])),
         r"queries\.jsonl:2: query has an empty text \(nothing to score\)", ("de", "ce")),
    Case("qrels-no-positive", score_beir(qrels="query-id\tcorpus-id\tscore\nq0\td0\t0\nq1\td1\t0\n"),
         r"test\.tsv: no positive pair: 2 judged row\(s\), none with score > 0", ("de", "ce")),
    # --- train-ce: every argument checked before its output folder exists
    Case("train-epochs-zero", train_args("--epochs", "0"),
         r"'--epochs' parameter of xenbench train-ce must be an int >= 1\. Got 0", ("train", "mining")),
    Case("train-negatives-zero", train_args("--negatives", "0"),
         r"'--negatives' parameter of xenbench train-ce must be an int >= 1\. Got 0", ("train", "mining")),
    Case("train-lr-negative", train_args("--lr=-1e-4"),
         r"'--lr' parameter of xenbench train-ce must be a float > 0\. Got -0\.0001", ("train", "mining")),
    Case("train-trainable-layers", train_args("--trainable-layers", "9"),
         r"'--trainable-layers' parameter of xenbench train-ce must be an int in \[0, 6\]\. Got 9", ("train", "mining")),
    Case("train-unknown-domain", train_args("--eval-domains", "noun.nothing"),
         r"'--eval-domains' parameter of xenbench train-ce must be WordNet-EL domains .* Got 'noun\.nothing'",
         ("train", "mining")),
    Case("train-unknown-training-domain", lambda t: ["train-ce", "--kind", "cls", "--out", str(t / "run"),
                                                    "--domains", "noun.Tops", "nope"],
         r"'--domains' parameter of xenbench train-ce must be WordNet-EL domains .* Got 'nope'", ("train", "mining")),
    Case("train-device", train_args("--device", "gpu0;rm"),
         r"'--device' parameter of xenbench train-ce must be .* Got 'gpu0;rm'", ("train", "mining")),
    Case("train-out-is-a-file", lambda t: ["train-ce", "--kind", "emb", "--out",
                                           str((t / "run").write_text("x") and t / "run"), "--domains", "noun.Tops"],
         r"'--out' parameter of xenbench train-ce must be a folder \(new, or a run to resume\)", ("train", "mining")),
    Case("train-planted-state", lambda t: ["train-ce", "--kind", "emb", "--out", str(_planted_state(t / "run")),
                                           "--domains", "noun.Tops", "--device", "cpu"],
         r"run/train_state\.pt: a resume state in the torch pickle format of an older xenbench, which is not read "
         r"\(a pickle can run code", ("mining",)),
    # --- eval-ce
    Case("eval-unknown-domain", raw("eval-ce", "models/cls-ce", "--domains", "noun.nothing"),
         r"'--domains' parameter of xenbench eval-ce must be WordNet-EL domains", ("ce",)),
    Case("eval-device", raw("eval-ce", "models/cls-ce", "--domains", "noun.Tops", "--device", "tpu"),
         r"'--device' parameter of xenbench eval-ce must be", ("ce",)),
    # --- findings: results files are regular files of at most 64 MiB, with fields of the expected types
    Case("findings-results-fifo", _findings(replace=lambda p: __import__("os").mkfifo(p)),
         r"00_data\.full\.results\.json: not a regular file \(a FIFO, socket or device\): expected a results JSON"),
    Case("findings-results-dev-zero", _findings(replace=lambda p: p.symlink_to("/dev/zero")),
         r"00_data\.full\.results\.json: not a regular file \(a FIFO, socket or device\)"),
    Case("findings-verify-results-dev-zero", _findings("--verify", replace=lambda p: p.symlink_to("/dev/zero")),
         r"00_data\.full\.results\.json: not a regular file \(a FIFO, socket or device\)"),
    Case("findings-results-nested-too-deep", _findings(replace=lambda p: p.write_text("[" * 100_000)),
         r"00_data\.full\.results\.json: nested too deeply to parse: expected a results JSON"),
    Case("findings-type-resources", _findings(edit=_set_field("resources", value="x")),
         r"00_data\.full\.results\.json: field 'resources' must be an object, got a string"),
    Case("findings-type-notebook", _findings(edit=_set_field("notebook", value=["00_data"])),
         r"field 'notebook' must be a string, got a list"),
    Case("findings-type-profile", _findings(edit=_set_field("profile", value=7)),
         r"field 'profile' must be a string, got a number"),
    Case("findings-type-dirty", _findings(edit=_set_field("provenance", "git", "dirty", value="no")),
         r"field 'provenance\.git\.dirty' must be true, false or null, got a string"),
    Case("findings-type-input", _findings(edit=_set_field("provenance", "inputs", value=[["store", "x"]])),
         r"field 'provenance\.inputs\[0\]' must be an object with string 'kind', 'path' and 'sha256'"),
    Case("findings-type-verify", _findings("--verify", edit=_set_field("provenance", "machine", "torch_threads",
                                                                       value="2")),
         r"field 'provenance\.machine\.torch_threads' must be an integer, got a string"),
    Case("findings-type-in-results", _findings(edit=_set_field("results", "domain", value=["noun.cognition"])),
         r"00_data\.full\.results\.json: its results cannot be turned into findings \((TypeError|AttributeError)"),
    Case("findings-marker-in-dataset-name", _findings("--write", edit=_set_field(
        "results", "domain", "name", value="noun.cognition <!-- findings:end -->")),
         r"field 'results\.domain\.name' holds '<!--', which would change the generated blocks of README\.md and "
         r"docs/"),
    Case("findings-verify-nothing", lambda t: ["findings", "--verify", "--results-dir",
                                               str((t / "empty").mkdir() or t / "empty")],
         r"empty: no results file with witnesses \(full, large, regime profiles of .*\): nothing was verified"),
    # --- findings: NaN where a number is needed
    Case("findings-nan-in-results", lambda t: ["findings", "--results-dir", str(_results_with_nan(t))],
         r"results/04_axn_lambda\.full\.results\.json: its results cannot be turned into findings \("),
]

CASES = [
    # --- BEIR corpus.jsonl
    Case("corpus-not-utf8", lambda t: ["score", "de", f"beir:{_bytes(beir(t), 'corpus.jsonl', BAD_UTF8)}",
                                       "--out", str(t / "out")], r"corpus\.jsonl:2: not valid UTF-8 \(byte 0xe9"),
    Case("corpus-bad-json", score_beir(corpus='{"_id": "d0", "text": "x"}\n{"_id": \n'),
         r"corpus\.jsonl:2: not valid JSON"),
    Case("corpus-array-line", score_beir(corpus="[1, 2]\n"), r"corpus\.jsonl:1: expected a JSON object, got array"),
    Case("corpus-missing-id", score_beir(corpus='{"text": "x"}\n'), r"corpus\.jsonl:1: missing field '_id'"),
    Case("corpus-bool-id", score_beir(corpus='{"_id": true, "text": "x"}\n'),
         r"corpus\.jsonl:1: field '_id' must be a string or an integer, got boolean"),
    Case("corpus-duplicate-id", score_beir(corpus=_jsonl([CORPUS[0], CORPUS[0]])),
         r"corpus\.jsonl:2: duplicate _id 'd0' \(first seen on line 1\)"),
    Case("corpus-empty-item", score_beir(corpus=_jsonl([CORPUS[0], {"_id": "d9", "title": " ", "text": ""}])),
         r"corpus\.jsonl:2: item has an empty title and an empty text"),
    Case("corpus-empty-file", score_beir(corpus=""), r"corpus\.jsonl: empty corpus: no items"),
    Case("corpus-text-not-string", score_beir(corpus='{"_id": "d0", "text": 5}\n'),
         r"corpus\.jsonl:1: field 'text' must be a string, got integer"),
    Case("corpus-missing", lambda t: ["score", "de", f"beir:{_unlinked(beir(t), 'corpus.jsonl')}", "--out",
                                      str(t / "out")], r"corpus\.jsonl: no such file"),
    # --- BEIR queries.jsonl
    Case("queries-empty-file", score_beir(queries=""), r"queries\.jsonl: no queries: the file is empty"),
    Case("queries-not-utf8", lambda t: ["score", "de", f"beir:{_bytes(beir(t), 'queries.jsonl', BAD_QUERY)}",
                                        "--out", str(t / "out")], r"queries\.jsonl:1: not valid UTF-8 \(byte 0xff"),
    Case("queries-mention-out-of-range", score_beir(queries='{"_id": "q0", "text": "abc", "mention": [1, 9]}\n'),
         r"queries\.jsonl:1: mention span \[1, 9\] out of range for text of length 3"),
    Case("queries-mention-bad-type", score_beir(queries='{"_id": "q0", "text": "abc", "mention": "1-2"}\n'),
         r"queries\.jsonl:1: field 'mention' must be \[start, end\] with two integers"),
    Case("queries-duplicate-id", score_beir(queries=_jsonl([QUERIES[0], QUERIES[0]])),
         r"queries\.jsonl:2: duplicate _id 'q0'"),
    # --- BEIR qrels
    Case("qrels-bad-header", score_beir(qrels="qid\tdid\tscore\n"), r"test\.tsv:1: bad header 'qid\\tdid\\tscore'"),
    Case("qrels-two-columns", score_beir(qrels="query-id\tcorpus-id\tscore\nq0\td0\n"),
         r"test\.tsv:2: expected 3 tab-separated columns"),
    Case("qrels-score-not-number", score_beir(qrels="query-id\tcorpus-id\tscore\nq0\td0\thigh\n"),
         r"test\.tsv:2: grade 'high' is not an integer of ASCII digits"),
    Case("qrels-unknown-query", score_beir(qrels="query-id\tcorpus-id\tscore\nq7\td0\t1\n"),
         r"test\.tsv:2: unknown query id 'q7' \(not in queries\.jsonl\)"),
    Case("qrels-unknown-item", score_beir(qrels="query-id\tcorpus-id\tscore\nq0\td7\t1\n"),
         r"test\.tsv:2: unknown corpus id 'd7' \(not in corpus\.jsonl\)"),
    Case("qrels-none", score_beir(qrels=False), r"qrels: no qrels files: expected at least one <split>\.tsv"),
    Case("qrels-not-utf8", lambda t: ["score", "de", f"beir:{_bytes(beir(t) / 'qrels', 'test.tsv', BAD_QRELS).parent}",
                                      "--out", str(t / "out")], r"test\.tsv:5: not valid UTF-8"),
    Case("beir-folder-missing", raw("score", "de", "beir:{tmp}/nowhere", "--out", "{tmp}/out"),
         r"nowhere: no such folder"),
    # --- ZESHEL
    Case("zeshel-mention-text-vs-span", score_zeshel(mentions=[mention(text="d e")]),
         r"test\.json:1: mention text 'd e' disagrees with its span \[1, 2\] in context document 'c1', which reads 'b c'"),
    Case("zeshel-span-out-of-range", score_zeshel(mentions=[mention(start_index=3, end_index=7, text="x")]),
         r"test\.json:1: mention token span \[3, 7\] out of range for context document 'c1' with 5 tokens"),
    Case("zeshel-unknown-world", score_zeshel(":nowhere"), r"nowhere\.json: no such file \(unknown world 'nowhere'"),
    Case("zeshel-no-mention-files", score_zeshel(mentions=False),
         r"mentions: no mention files: expected mentions/<split>\.json"),
    Case("zeshel-missing-split", score_zeshel(":w@val"), r"mentions/val\.json: no such file"),
    Case("zeshel-label-not-in-world", score_zeshel(mentions=[mention(label_document_id="zz")]),
         r"test\.json:1: label_document_id 'zz' is not a document of world 'w'"),
    Case("zeshel-no-mention-of-world", score_zeshel(mentions=[mention(corpus="other")]),
         r"mentions: no mention of world 'w' in \['test\.json'\]"),
    # --- dataset specs
    Case("spec-unknown-kind", raw("score", "de", "msmarco:x", "--out", "{tmp}/out"),
         r"'spec' parameter of load_dataset must be 'wordnet-el:<domain>', 'beir:<folder>' or 'zeshel:"),
    Case("spec-unknown-domain", raw("score", "de", "wordnet-el:noun.nothing", "--out", "{tmp}/out"),
         r"'domain' parameter of load_wordnet_el must be one of \['noun\.Tops'"),
    # --- score: samples and id files
    Case("n-queries-negative", score_args("--n-queries", "-3"),
         r"'--n-queries' parameter of xenbench score must be an int in \[1, 3\] \(the queries of beir\)\. Got -3"),
    Case("n-queries-zero", score_args("--n-queries", "0"), r"'--n-queries' parameter .* Got 0 instead"),
    Case("n-items-too-many", score_args("--n-items", "1000"),
         r"'--n-items' parameter of xenbench score must be an int in \[1, 4\] \(the items of beir\)\. Got 1000"),
    Case("query-ids-duplicate", score_args(ids={"query-ids": "q0\nq1\nq0\n"}),
         r"query-ids\.txt:3: duplicate id 'q0' \(first on line 1\)"),
    Case("query-ids-unknown", score_args(ids={"query-ids": "q0\nq9\n"}),
         r"query-ids\.txt:2: unknown id 'q9': not one of the 3 queries of beir"),
    Case("item-ids-empty-file", score_args(ids={"item-ids": "\n\n"}), r"item-ids\.txt: no ids: expected one id per line"),
    Case("ids-and-sample", score_args("--n-queries", "2", ids={"query-ids": "q0\n"}),
         r"'--n-queries' parameter of xenbench score must be left out when --query-ids is given"),
    Case("out-parent-is-a-file", lambda t: ["score", "de", f"beir:{beir(t)}", "--out",
                                            str((t / "afile").write_text("x") and t / "afile" / "out")],
         r"afile: is a file, so --out .*afile/out cannot be created below it"),
    Case("batch-size-zero", lambda t: ["score", "untrained-cls", f"beir:{beir(t)}", "--out", str(t / "out"),
                                       "--batch-size", "0"], r"'--batch-size' parameter of xenbench score must be an int >= 1"),
    Case("chunk-pairs-zero", lambda t: ["score", "untrained-cls", f"beir:{beir(t)}", "--out", str(t / "out"),
                                        "--chunk-pairs", "0"], r"'--chunk-pairs' parameter of xenbench score must be an int >= 1"),
    Case("old-bundled-name", lambda t: ["score", "bundled-cls", f"beir:{beir(t)}", "--out", str(t / "out")],
         r"'ce' parameter of run_score_job must be one of \['untrained-cls', 'untrained-emb'\]"),
    Case("model-folder-missing", lambda t: ["score", str(t / "no-model"), f"beir:{beir(t)}", "--out", str(t / "out")],
         r"no-model: no such file or folder: expected a xenbench CE folder"),
    Case("model-folder-not-a-ce", lambda t: ["score", str((t / "empty").mkdir() or t / "empty"), f"beir:{beir(t)}",
                                             "--out", str(t / "out")], r"empty: not a cross-encoder"),
    # --- model folders: weights are verified against checksums.json before they become tensors
    Case("weights-zeroed-64k", score_model(_zero_middle),
         r"ce/trained\.safetensors: is corrupted or was replaced: its SHA-256 differs"),
    Case("weights-random-bytes", score_model(_random_bytes), r"ce/trained\.safetensors: is corrupted or was replaced"),
    Case("weights-truncated", score_model(_truncate), r"ce/trained\.safetensors: is corrupted or was replaced"),
    Case("weights-empty", score_model(lambda f: (f / "trained.safetensors").write_bytes(b"")),
         r"ce/trained\.safetensors: is corrupted or was replaced"),
    Case("weights-missing", score_model(lambda f: (f / "trained.safetensors").unlink()),
         r"ce/trained\.safetensors: missing: the folder has a config but no trained weights"),
    Case("config-broken-json", score_model(lambda f: (f / "xenbench_ce.json").write_text("{ not json")),
         r"ce/xenbench_ce\.json: not a valid xenbench CE config \(JSONDecodeError"),
    Case("checksums-missing", score_model(lambda f: (f / "checksums.json").unlink()),
         r"ce/checksums\.json: missing: the weights cannot be verified"),
    Case("checksums-broken", score_model(lambda f: (f / "checksums.json").write_text("[]")),
         r"ce/checksums\.json: unreadable checksums"),
    # --- notebooks
    Case("notebook-unknown", raw("run", "99_nothing"), r"'notebook' parameter of run_notebook must be one of \['00_data'"),
    Case("notebook-timeout-zero", raw("run", "00_data", "--timeout", "0"), r"'timeout' parameter of run_notebook must be an int >= 1 \(seconds per cell\). Got 0"),
    Case("notebook-unknown-profile", raw("run", "00_data", "--profile", "huge"), r"'profile' parameter of notebook 00_data must be one of \['full', 'quick'\]. Got 'huge'"),
    Case("notebook-unknown-param", raw("run", "00_data", "-p", "n_candidate", "64"), r"n_candidate"),
    Case("notebook-param-out-of-range", raw("run", "00_data", "-p", "n_candidates", "0"),
         r"'n_candidates' parameter of notebook 00_data must be an int"),
    Case("notebook-04-lambda-out-of-range", raw("run", "04_axn_lambda", "-p", "lambdas", "-0.5,0.5"),
         r"'lambdas' parameter of notebook 04_axn_lambda must be a list of float with length >= 1, each in \[0, 1\]"),
    Case("notebook-05-lambda-out-of-range", raw("run", "05_pefa_lambda", "-p", "lambdas", "0.5,1.5"),
         r"'lambdas' parameter of notebook 05_pefa_lambda must be a list of float with length >= 1, each in \[0, 1\]"),
    Case("notebook-param-wrong-type", raw("run", "00_data", "-p", "seed", "abc"), r"'seed' parameter of notebook 00_data"),
    Case("findings-stale-readme-dir", lambda t: ["findings", "--check", "--results-dir", str((t / "none").mkdir() or t / "none")],
         r"the findings section disagrees with .*none; run `xenbench findings --write`"),
    Case("findings-results-dir-missing", raw("findings", "--results-dir", "{tmp}/nowhere"),
         r"nowhere: no such folder of results files"),
    *HARDENING,
]
def _tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def test_the_table_covers_enough_cases():
    assert len(CASES) >= 45 and len({c.id for c in CASES}) == len(CASES)


def _forbid(monkeypatch, steps: tuple[str, ...]) -> None:
    import importlib

    for step in steps:
        for module, attr in EXPENSIVE[step]:
            def entered(*args, _step=step, **kwargs):
                raise AssertionError(f"the expensive step {_step!r} was entered")
            monkeypatch.setattr(importlib.import_module(module), attr, entered)


@pytest.mark.filterwarnings("ignore:untrained-cls:UserWarning")
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_fails_with_one_clear_line(case, tmp_path, capsys, monkeypatch):
    args = case.args(tmp_path)
    _forbid(monkeypatch, case.never)
    before = _tree(tmp_path)
    rc = main(args)
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2, f"exit code {rc}, stderr {err}"
    errors = [line for line in err if line.startswith("xenbench: error: ")]
    assert len(errors) == 1, err  # one line, no traceback
    assert re.search(case.match, errors[0]), errors[0]
    assert not any("Traceback" in line for line in err)
    assert _tree(tmp_path) == before, "a failed command left files behind"
