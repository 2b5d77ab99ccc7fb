"""Reports about the user's run: they name the data and CE the run used, cite the report's own results file, and
their injected-parameters cell holds only the values the run uses (issue 53, item 3)."""
from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from test_notebook_harness import write_tiny  # the template notebook of the harness tests
from xenbench import harness as xh
from xenbench.harness.runner import _mark_unused
from xenbench.studies.findings.about import dataset_phrase, run_markdown


def test_a_run_on_a_beir_folder_with_a_hub_ce_is_described_as_such():
    params = {**xh.profile_values("03_adacur_rounds"), "dataset": "beir:/data/mine", "model": "mylab/my-ce",
              "ce": "mylab/my-ce", "max_queries": 50, "max_items": 300, "first_stage": "bm25"}
    text = run_markdown(params)
    assert text == ("**This run.** Data: the BEIR folder `/data/mine`. CE: the CE `mylab/my-ce`, "
                    "scored on demand on a seeded sample of 50 queries × 300 items (cached). First stage: "
                    "`bm25`.")
    assert "WordNet" not in text and "cls-ce" not in text and "noun.cognition" not in text  # the store is not used


def test_the_bundled_run_names_its_store_and_domain():
    text = run_markdown({**xh.profile_values("03_adacur_rounds")})
    assert "the bundled WordNet-EL domain `noun.cognition`" in text
    assert ("the CE `cls-ce`: its exact scores, read from the score store `cls-ce` in "
            "`../data/scores/noun.cognition`") in text


@pytest.mark.parametrize(("spec", "words"), [
    ("wordnet-el:verb.emotion", "the bundled WordNet-EL domain `verb.emotion`"),
    (["wordnet-el:a", "wordnet-el:b"], "the bundled WordNet-EL domains `a`, `b`"),
    ("noun.food,verb.contact", "the bundled WordNet-EL domains `noun.food`, `verb.contact`"),
    ("wordnet-el:all", "every bundled WordNet-EL domain"),
    ("zeshel:/z/root:yugioh@test", "the ZESHEL world `yugioh@test` of `/z/root`"),
    (["beir:/a", "beir:/b"], "the BEIR folder `/a` and the BEIR folder `/b`"),
])
def test_dataset_specs_in_words(spec, words):
    assert dataset_phrase(spec) == words


def test_user_strings_are_escaped_and_change_no_markup():
    text = run_markdown({"dataset": "beir:/tmp/<img src=x onerror=alert(1)>_*x*_", "model": "../m/[a](b)",
                         "ce": "[a](b)", "max_queries": None, "max_items": None})
    from xenbench._markup import markdown_html

    shown = markdown_html(text)  # as the report shows it (xenbench._markup: raw HTML off)
    assert "<img" not in shown and "<code>/tmp/&lt;img src=x onerror=alert(1)&gt;_*x*_</code>" in shown
    assert "<em>" not in shown and "<a " not in shown  # no emphasis, no link: the names read as themselves
    assert "<code>[a](b)</code>" in shown and "all queries × all items" in text


def test_unused_parameters_follow_the_model_rule():
    spec = xh.load_spec("03_adacur_rounds")
    values = xh.profile_values(spec)
    assert xh.unused_params(spec, values) == (("max_length",), "only a model's sample uses them")  # max_queries: a store's too
    assert xh.unused_params(spec, {**values, "max_length": 64})[0] == ()  # a value is shown (and refused)
    assert xh.unused_params(spec, {**values, "model": "../models/cls-ce"}) == (("scores_dir", "ce"),
                                                                              "model replaces the score store")
    assert xh.unused_params(xh.load_spec("00_data"), xh.profile_values("00_data")) == ((), "")  # no model parameter


def test_the_injected_cell_names_the_unused_parameters():
    nb = new_notebook(cells=[new_code_cell("x = 1", metadata={"tags": ["parameters"]}),
                             new_code_cell("# Parameters\nmodel = \"m\"\n", metadata={"tags": ["injected-parameters"]})])
    _mark_unused(nb, ("scores_dir", "ce"), "model replaces the score store")
    assert nb.cells[1].source == ('# Parameters\nmodel = "m"\n# Not used by this run (model replaces the score store): '
                                  "scores_dir, ce\n")
    assert nb.cells[0].source == "x = 1"
    _mark_unused(nb, (), "")
    assert nb.cells[1].source.count("Not used") == 1


def test_save_results_is_named_by_the_run_stem(tmp_path, monkeypatch):
    monkeypatch.delenv(xh.REPORTS_ENV, raising=False)
    assert xh.save_results("tiny", "quick", {"n": 1}, out_dir=tmp_path).name == "tiny.quick.lab.results.json"
    monkeypatch.setenv(xh.REPORTS_ENV, str(tmp_path))
    monkeypatch.delenv("XENBENCH_RUN_STEM", raising=False)
    assert xh.save_results("tiny", "quick", {"n": 1}).name == "tiny.quick.results.json"
    monkeypatch.setenv("XENBENCH_RUN_STEM", "tiny.quick.beir-mine.my-ce")
    assert xh.save_results("tiny", "quick", {"n": 1}) == tmp_path / "tiny.quick.beir-mine.my-ce.results.json"
    monkeypatch.setenv("XENBENCH_RUN_STEM", "other.quick.beir-mine")  # another notebook's stem is not this one's
    assert xh.save_results("tiny", "quick", {"n": 1}).name == "tiny.quick.results.json"


MODEL_YAML = """\
params:
  n: {type: int, min: 1, max: 10}
  model: {type: model}
  max_length: {type: int, min: 1, nullable: true, requires: model}
  first_stages: {type: list, items: str}
profiles:
  quick: {n: 3, model: "", max_length: null, first_stages: [bm25]}
"""


@pytest.mark.notebook
def test_a_run_reports_its_data_its_own_results_file_and_only_used_parameters(tmp_path):
    body = ['path = xb.harness.save_results("withmodel", profile, {"n": n})\nprint(path.name)']
    nb_path = write_tiny(tmp_path / "nbs", "withmodel", body=body, yaml_text=MODEL_YAML)
    nb = nbformat.read(nb_path, as_version=4)
    nb.cells[2].source = 'profile = "quick"\nn = 3\nmodel = ""\nmax_length = None\nfirst_stages = ["bm25"]'
    nbformat.write(nb, nb_path)
    out = tmp_path / "reports"
    source = nb_path.read_bytes()
    executed = xh.run_notebook(nb_path, params={"n": 4}, out_dir=out, html=False, progress_bar=False)
    assert nb_path.read_bytes() == source  # the executed copy goes to the reports, never back to the notebook
    stem = executed.name.removesuffix(".ipynb")
    assert stem.startswith("withmodel.quick.p")  # n differs from the profile: the run has its own stem
    run = nbformat.read(executed, as_version=4)
    injected = next(c for c in run.cells if "injected-parameters" in c.metadata.get("tags", []))
    assert "n = 4" in injected.source and "max_length =" not in injected.source  # unused without a model
    assert injected.source.rstrip().endswith("# Not used by this run (only a model's sample uses them): max_length")
    check = run.cells[[c.metadata.get("tags") for c in run.cells].index(["injected-parameters"]) + 1]
    shown = [o["data"]["text/plain"] for o in check.outputs if "text/html" in o.get("data", {})]
    assert shown[-1] == "**This run.** First stage: `bm25`."
    printed = "".join(o.get("text", "") for o in run.cells[-1].outputs)
    assert printed.strip() == f"{stem}.results.json"  # what the findings cite is the file beside the report
    assert (Path(out) / f"{stem}.results.json").is_file()

