"""Semantic parameter types of a notebook's profiles file (issue 55, item 6): each type is checked by one function
before the kernel, a good value passes and a bad one is refused in one line naming the parameter and what was expected
(and the file and line, for a profiles file or a data file); ``requires: model`` and ``replaced_by: model`` say which
parameters a run with or without a model does not use.

The data: a small BEIR folder written here (``tests/_cli_inputs.py``), the bundled score stores and CE folders.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from xenbench import harness as xh
from xenbench.errors import DataError, ParameterError
from xenbench.harness.preflight import CHECKS, check_typed

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the shared test helpers
from _cli_inputs import WORDS, write_beir  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
SCORES = REPO / "data" / "scores" / "noun.cognition"
CE = REPO / "models" / "cls-ce"

TYPED_YAML = """\
params:
  data: {type: dataset}
  rankers: {type: list, items: first_stage, in: data}
  dev: {type: device}
  scores: {type: folder, replaced_by: model}
  store: {type: store, in: scores, replaced_by: model}
  ces: {type: list, items: model}
  model: {type: model}
  max_length: {type: int, min: 1, nullable: true, requires: model}
profiles:
  quick: {data: "", rankers: [bm25], dev: cpu, scores: "", store: "", ces: [], model: "", max_length: null}
"""


@pytest.fixture(scope="module")
def beir(tmp_path_factory) -> Path:
    """A BEIR folder of 12 items and 6 queries, each query naming one item."""
    root = tmp_path_factory.mktemp("typed")
    items = [{"_id": f"d{k}", "title": w, "text": f"{w} is a {WORDS[(k * 5) % 12]}"} for k, w in enumerate(WORDS[:12])]
    queries = [{"_id": f"q{k}", "text": f"about {WORDS[k]}"} for k in range(6)]
    return write_beir(root / "mine", items, queries, [(f"q{k}", f"d{k}", 1) for k in range(6)])


@pytest.fixture
def typed(tmp_path: Path) -> xh.NotebookSpec:
    path = tmp_path / "typed.yaml"
    path.write_text(TYPED_YAML, encoding="utf-8")
    return xh.load_spec(path)


@pytest.fixture
def good(beir: Path, tmp_path: Path) -> dict:
    run = tmp_path / "good.trec"
    run.write_text("".join(f"q{q} Q0 d{d} {d + 1} {12 - d} mine\n" for q in range(6) for d in range(12)),
                   encoding="utf-8")
    return {"data": f"beir:{beir}", "rankers": ["bm25", f"run:{run}"], "dev": "cpu", "scores": str(SCORES),
            "store": "cls-ce", "ces": [str(CE)], "model": "", "max_length": None}


def _one_line(err: BaseException) -> str:
    text = str(err)
    assert "\n" not in text, text
    return text


def test_every_semantic_type_has_one_check():
    assert set(CHECKS) == set(xh.SEMANTIC_TYPES)
    assert list(CHECKS)[:2] == ["device", "folder"] and list(CHECKS)[-1] == "first_stage"  # cheapest first


def test_good_values_of_every_type_pass(typed, good):
    check_typed(typed, good)
    xh.preflight(typed, good)  # and the whole check before a kernel


# (parameter, bad value, error class, what the one line says)
BAD = [
    ("data", "beir:/nonexistent/folder", DataError, r"no such folder \(the 'data' parameter of notebook typed is"),
    ("data", "wordnet-el:noun.fod", ParameterError,
     r"The 'data' parameter of notebook typed must be dataset specs that open .*'wordnet-el:noun.fod' does not"),
    ("rankers", ["bm25", "bm26"], ParameterError, r"The 'rankers' parameter of notebook typed must be"),
    ("dev", "tpu9", ParameterError, r"The 'dev' parameter of notebook typed must be 'auto', 'cpu'"),
    ("scores", "/nonexistent/scores", ParameterError,
     r"The 'scores' parameter of notebook typed must be an existing folder"),
    ("store", "nope", ParameterError,
     r"The 'store' parameter of notebook typed must be one of the score stores in scores '.*' \(cls-ce, de, emb-ce"),
    ("ces", ["/nonexistent/ce"], ParameterError,
     r"The 'ces' parameter of notebook typed must be a cross-encoder folder.*no such file or folder"),
    ("model", str(REPO / "their.ckpt"), ParameterError,
     r"The 'model' parameter of notebook typed must be a cross-encoder folder.*a Lightning \.ckpt needs its base"),
]


@pytest.mark.parametrize(("name", "value", "error", "message"), BAD)
def test_a_bad_value_of_each_type_is_one_line_naming_the_parameter(typed, good, name, value, error, message):
    kind = typed.params[name].kind
    with pytest.raises(error) as err:
        check_typed(typed, {**good, name: value}, kinds=[kind])
    assert re.search(message, _one_line(err.value)), err.value


def test_a_run_file_that_does_not_fit_its_dataset_names_file_and_line(typed, good, tmp_path):
    run = tmp_path / "bad.trec"
    run.write_text("q1 Q0 d1 1 2.0 mine\nq0 Q0 d99 1 1.0 mine\n", encoding="utf-8")
    with pytest.raises(DataError) as err:
        check_typed(typed, {**good, "rankers": [f"run:{run}"]}, kinds=["first_stage"])
    assert _one_line(err.value).startswith(f"{run}:2: ") and "d99" in str(err.value)


def test_a_value_of_the_wrong_python_type_says_what_the_semantic_type_expects(typed):
    with pytest.raises(ParameterError, match=r"The 'dev' parameter of notebook typed must be text naming a device: "
                                             r"auto, cpu, cuda, cuda:N or mps\. Got 3 instead\."):
        xh.validate_params(typed, {"dev": 3})
    with pytest.raises(ParameterError, match=r"'rankers' parameter of notebook typed must be a list of first stages\."):
        xh.validate_params(typed, {"rankers": "bm25"})
    # -p text of a list of a semantic type is text, element by element (never read as YAML numbers)
    assert xh.parse_cli_params(typed, [("rankers", "bm25,de")]) == {"rankers": ["bm25", "de"]}


def _spec_error(tmp_path: Path, params: str, quick: str) -> str:
    path = tmp_path / "bad.yaml"
    path.write_text(f"params:\n{params}profiles:\n  quick: {{{quick}}}\n", encoding="utf-8")
    with pytest.raises(DataError) as err:
        xh.load_spec(path)
    text = _one_line(err.value)
    assert text.startswith(f"{path}:"), text
    return text


@pytest.mark.parametrize(("params", "quick", "message"), [
    ("  n: {type: int}\n  m: {type: modle}\n", "n: 1, m: x", r":3: parameter 'm': expected a mapping with 'type' one "
                                                             r"of \[.*'model', 'first_stage', 'dataset'"),
    ("  m: {type: list, items: datasets}\n", "m: []", r":2: parameter 'm': 'items' is only for lists and must be"),
    ("  s: {type: store}\n", "s: x", r":2: parameter 's': a store parameter needs 'in: <a folder parameter"),
    ("  d: {type: dataset}\n  r: {type: first_stage, in: n}\n  n: {type: int}\n", "d: x, r: de, n: 1",
     r":3: parameter 'r': a first_stage parameter needs 'in: <a dataset parameter"),
    ("  n: {type: int, in: n}\n", "n: 1", r":2: parameter 'n': 'in' is only for"),
    ("  n: {type: int, nullable: true, requires: m}\n  m: {type: str}\n", "n: null, m: x",
     r":2: parameter 'n': 'requires' must name a parameter of type model; got 'm'"),
    ("  n: {type: int, replaced_by: m}\n  m: {type: model}\n", "n: 1, m: x",
     r":2: parameter 'n': 'replaced_by' is for folder and store parameters"),
    ("  d: {type: device, min: 1}\n", "d: cpu", r":2: parameter 'd': 'min' applies to int, float and list"),
])
def test_a_profiles_file_with_an_unknown_type_or_link_is_refused_naming_file_and_line(tmp_path, params, quick,
                                                                                       message):
    assert re.search(message, _spec_error(tmp_path, params, quick))


def test_requires_model_is_unused_without_a_model_and_refused_with_a_value(typed, good):
    assert xh.unused_params(typed, good) == (("max_length",), "only a model's sample uses them")
    assert xh.unused_params(typed, {**good, "max_length": 64})[0] == ()  # shown, since refused:
    with pytest.raises(ParameterError) as err:
        xh.preflight(typed, {**good, "max_length": 64})
    assert _one_line(err.value) == ("The 'max_length' parameter of notebook typed must be null unless model is given "
                                    "(only a model's on-demand scoring uses it; a precomputed store is read as it is). "
                                    "Got 64 instead.")


def test_replaced_by_model_is_unused_and_unchecked_with_a_model(typed, good):
    with_model = {**good, "model": str(CE), "scores": "/nonexistent/scores", "store": "nope"}
    assert xh.unused_params(typed, with_model) == (("scores", "store"), "model replaces the score store")
    check_typed(typed, with_model)  # the store a model replaces is not opened; the model is checked
    with pytest.raises(ParameterError, match=r"The 'model' parameter of notebook typed must be a cross-encoder"):
        check_typed(typed, {**with_model, "model": "/nonexistent/ce"})


def test_the_kernel_check_refuses_what_preflight_refuses(typed, good, monkeypatch):
    monkeypatch.chdir(typed.path.parent)
    namespace = {**good, "profile": "quick"}
    assert xh.check_namespace(dict(namespace), "typed")["store"] == "cls-ce"
    with pytest.raises(ParameterError, match=r"'max_length' parameter of notebook typed must be null unless model"):
        xh.check_namespace({**namespace, "max_length": 64}, "typed")
    with pytest.raises(ParameterError, match=r"'store' parameter of notebook typed must be one of the score stores "
                                             r"in scores"):
        xh.check_namespace({**namespace, "store": "nope"}, "typed")
    # with a model: the store is neither checked nor used, and takes the model's name for figures
    used = xh.check_namespace({**namespace, "model": str(CE), "store": "nope", "scores": "/nope"}, "typed")
    assert used["store"] == "cls-ce" and "scores" not in used


OLD_NAMES = {"dataset": "dataset", "datasets": "dataset", "eval_datasets": "dataset", "device": "device",
             "first_stage": "first_stage", "first_stages": "first_stage", "scores_dir": "folder",
             "bundled_scores": "folder", "model": "model", "ce_model": "model"}


@pytest.mark.parametrize("name", xh.list_notebooks())
def test_the_notebooks_type_what_preflight_once_knew_by_name(name):
    """The names preflight kept in tuples (datasets, devices, folders, first stages, CEs) are typed in every profiles
    file, and the parameters only a model uses, or that it replaces, say so."""
    spec = xh.load_spec(name)
    typed = {n: p.kind for n, p in spec.params.items() if n in OLD_NAMES}
    assert typed == {n: OLD_NAMES[n] for n in typed}
    if "model" in spec.params:
        assert spec.params["max_length"].requires == "model"
        assert [n for n, p in spec.params.items() if p.replaced_by == "model"] == ["scores_dir", "ce"]
        assert spec.params["ce"].kind == "store" and spec.params["ce"].within == "scores_dir"
    assert spec.params.get("ces") is None or spec.params["ces"].kind in ("model", "store")
