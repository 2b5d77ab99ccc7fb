"""The smaller items of a newcomer's first hour (issue 53, item 5): `make setup` named in the README, the score cache
folder documented, 00's mention ambiguity on data without mention spans, a CE folder made by hand, and
`untrained-cls` as a notebook's model. (`xenbench data check`'s grades: tests/test_cli.py.)"""
from __future__ import annotations

import re
import shutil
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from xenbench import harness as xh
from xenbench.errors import DataError, ParameterError

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the shared test helpers
from _cli_inputs import smallest_beir  # noqa: E402

REPO = Path(__file__).resolve().parent.parent


def test_the_readme_names_make_setup_before_its_first_venv_command():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    first_venv = min(readme.index(".venv/bin/"), readme.index("source .venv"))
    assert 0 <= readme.find("make setup") < first_venv
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    assert re.search(r"^setup: \$\(STAMP\)( \$\(JUPYTER_EXT\))?$", makefile, re.M)  # creates .venv and installs
    assert re.search(r"^\$\(STAMP\):.*\n\ttest -x \$\(BIN\)/python \|\| \$\(PYTHON\) -m venv \$\(VENV\)$", makefile, re.M)


def test_the_documented_cache_folder_is_where_scores_embeddings_and_fingerprints_go(tmp_path, monkeypatch):
    from xenbench.models import fingerprint, retrievers

    usage = (REPO / "docs" / "USAGE.md").read_text(encoding="utf-8")
    assert "`$XENBENCH_CACHE` when set, else `~/.cache/xenbench`" in usage
    assert all(f"`{sub}/`" in usage for sub in ("scores", "embeddings", "fingerprints"))
    monkeypatch.setenv("XENBENCH_CACHE", str(tmp_path))
    assert fingerprint.cache_root() == tmp_path == retrievers.default_cache_dir()
    monkeypatch.delenv("XENBENCH_CACHE")
    assert fingerprint.cache_root() == Path.home() / ".cache" / "xenbench" == retrievers.default_cache_dir()


def test_ambiguity_is_summarized_over_the_queries_with_a_mention_span():
    from xenbench.studies.stats import ambiguity_line, ambiguity_summary

    summary = ambiguity_summary(np.array([0, 1, 1, 3]))  # by hand: 3 mentions, 2 unambiguous, max 3, mean 5/3
    assert summary == {"queries": 4, "mentions": 3, "unambiguous_share": pytest.approx(2 / 3), "max": 3,
                       "mean": pytest.approx(5 / 3)}
    assert ambiguity_line(np.array([0, 1, 1, 3])) == ("66.7% of the 3 mentions are shared by one item only; the most "
                                                      "shared by 3 items; mean over mentions 1.67.")


def test_data_without_mention_spans_gets_a_sentence_and_no_runtime_warning(tmp_path):
    """A BEIR folder has no mention spans: before, 00 took the mean of an empty slice (a RuntimeWarning, and NaN)."""
    from xenbench import findings
    from xenbench.data.sources import load_dataset
    from xenbench.studies.stats import ambiguity_line, ambiguity_summary, mention_ambiguity

    ds = load_dataset(f"beir:{smallest_beir(tmp_path)}")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a RuntimeWarning fails the test
        ambiguity = mention_ambiguity(ds)
        summary = ambiguity_summary(ambiguity)
        line = ambiguity_line(ambiguity)
    assert ambiguity.tolist() == [0, 0, 0]
    assert summary == {"queries": 3, "mentions": 0, "unambiguous_share": None, "max": None, "mean": None}
    assert line == ("None of the 3 queries marks a mention span (BEIR queries have none): mention ambiguity does not "
                    "apply to this dataset.")
    baselines = [{"dataset": ds.name, "retriever": "DE", "n_queries": 3, "n_items": 4, "k": k, "accuracy": 1.0}
                 for k in (1, 4)]
    results = {"baselines": baselines, "domain": {"name": ds.name, "items": 4, "queries": 3, "unambiguous_share": None}}
    assert findings.lines("00_data", results)[-1].endswith("no query marks a mention span, so mention ambiguity does "
                                                           "not apply.")


def test_a_ce_folder_changed_by_hand_is_refused_until_its_checksums_are_recorded(tmp_path):
    import torch
    from safetensors.torch import load_file, save_file

    from xenbench.models.loading import load_cross_encoder, record_checksums

    folder = tmp_path / "my-ce"
    shutil.copytree(REPO / "models" / "cls-ce", folder)
    weights = load_file(str(folder / "trained.safetensors"))
    name = "bert.encoder.layer.0.attention.output.LayerNorm.bias"
    weights[name] = weights[name] + torch.tensor(0.5, dtype=weights[name].dtype)  # weights written by other code
    save_file(weights, str(folder / "trained.safetensors"))
    with pytest.raises(DataError, match=r"trained\.safetensors: is corrupted or was replaced: its SHA-256 differs .*"
                                        r"record the folder's checksums again: xb\.loading\.record_checksums"):
        load_cross_encoder(folder)
    assert record_checksums(folder) == folder / "checksums.json"
    ce = load_cross_encoder(folder)  # verified against the recorded digests, and the new weights are the ones used
    assert torch.equal(ce.model.state_dict()[name], weights[name].float())
    (folder / "checksums.json").unlink()
    with pytest.raises(DataError, match=r"checksums\.json: missing: the weights cannot be verified .*record_checksums"):
        load_cross_encoder(folder)
    with pytest.raises(DataError, match=r"xenbench_ce\.json: missing: not a xenbench CE folder"):
        record_checksums(tmp_path)
    models = (REPO / "docs" / "MODELS.md").read_text(encoding="utf-8")
    assert "### A xenbench CE folder and its checksums.json" in models
    assert "xb.loading.record_checksums('path/to/my-ce')" in models


@pytest.mark.filterwarnings("ignore:untrained-cls:UserWarning")
def test_untrained_cls_works_as_a_notebook_model_as_with_xenbench_score(tmp_path, monkeypatch):
    """`-p model untrained-cls` is planned before the kernel (estimated, keyed by its weights) and scored by the kernel's
    load_setup into the same cache entry, which the next plan finds: nothing left to score."""
    from xenbench.studies.setup import load_setup

    monkeypatch.setenv("XENBENCH_CACHE", str(tmp_path / "cache"))
    values = {**xh.profile_values("03_adacur_rounds"), "model": "untrained-cls", "max_queries": 4, "max_items": 6,
              "profile": "quick"}
    with pytest.warns(UserWarning, match="untrained-cls: the head is random"):
        plan = xh.plan_scoring("03_adacur_rounds", values)
    assert plan["pairs"] == 24 and plan["seconds"] > 0
    setup = load_setup(None, values["dataset"], seed=values["seed"], max_items=6, model="untrained-cls",
                       max_queries=4, device="cpu")
    assert setup.M.shape == (4, 6) and setup.attrs["model"] == "untrained-cls"
    assert xh.plan_scoring("03_adacur_rounds", values)["pairs"] == 0  # the kernel's store is the plan's cache entry
    with pytest.raises(ParameterError,
                       match=r"'model' parameter of notebook 03_adacur_rounds must be one of \['untrained-cls', "
                             r"'untrained-emb'\]"):
        xh.preflight("03_adacur_rounds", {**values, "model": "untrained-xl"})
