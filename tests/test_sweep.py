"""xenbench sweep: a grid of notebook runs into one tidy table, resumable, failures recorded."""
from __future__ import annotations

import json

import nbformat
import pandas as pd
import pytest

from xenbench import sweep
from xenbench.cli import main
from xenbench.errors import ParameterError

from test_notebook_harness import write_tiny  # the template notebook of the harness tests


def test_grid_is_the_product_in_order():
    assert sweep.grid({"a": [1, 2], "b": ["x", "y"]}) == [
        {"a": 1, "b": "x"}, {"a": 1, "b": "y"}, {"a": 2, "b": "x"}, {"a": 2, "b": "y"}]


def test_point_id_is_stable_and_distinct():
    assert sweep.point_id({"lam": [0.5]}) == sweep.point_id({"lam": [0.5]})
    assert sweep.point_id({"lam": [0.5]}) != sweep.point_id({"lam": [0.25]})
    assert sweep.point_id({"lam": [0.5]}).startswith("lam=0.5-")


def test_tidy_flattens_scalars_and_record_tables():
    results = {"params": {"seed": 1}, "coverage": {"dev": 0.25}, "n": 3,
               "results": [{"method": "XS", "k": 10, "recall": 0.5, "recall_se": 0.1}]}
    table = sweep.tidy([("p1", {"lam": 0.5}, results)])
    got = dict(zip(table["metric"], table["value"]))
    assert got == {"coverage.dev": 0.25, "n": 3.0, "results[method=XS,k=10].recall": 0.5,
                   "results[method=XS,k=10].recall_se": 0.1}
    assert list(table.columns) == ["point", "lam", "metric", "value"] and set(table["point"]) == {"p1"}


def _tiny_failing_at(tmp_path, bad: int):
    body = [f"assert n != {bad}, 'n = {bad} is the broken point'",
            'xb.harness.save_results("tiny", profile, {"n": n, "score": {"value": n * scale / 10}})']
    return write_tiny(tmp_path / "nbs", body=body)


@pytest.mark.notebook
def test_sweep_collects_records_failures_and_resumes(tmp_path):
    nb = _tiny_failing_at(tmp_path, bad=3)
    out = tmp_path / "sweep"
    table = sweep.run_sweep(str(nb), {"n": ["1", "2", "3", "4", "5"]}, profile="quick", out_dir=out)
    points = pd.read_csv(out / "points.csv")
    assert list(points["status"]) == ["ok", "ok", "failed", "ok", "ok"]
    assert "n = 3 is the broken point" in points.loc[2, "error"]
    assert sorted(table.loc[table["metric"] == "score.value", "value"]) == [0.1, 0.2, 0.4, 0.5]
    pd.testing.assert_frame_equal(pd.read_parquet(out / "results.parquet"), table)
    assert (out / "summary.html").is_file() and "Metrics that change with n" in (out / "summary.html").read_text()
    ok_status = out / "points" / sweep.point_id({"n": 1}) / "point.json"
    before = ok_status.stat().st_mtime_ns

    # Fix the notebook and run again: finished points are skipped, the failed one is retried.
    nb_node = nbformat.read(nb, as_version=4)
    nb_node.cells[4].source = "pass"
    nbformat.write(nb_node, nb)
    table = sweep.run_sweep(str(nb), {"n": ["1", "2", "3", "4", "5"]}, profile="quick", out_dir=out)
    assert ok_status.stat().st_mtime_ns == before
    assert list(pd.read_csv(out / "points.csv")["status"]) == ["ok"] * 5
    assert sorted(table.loc[table["metric"] == "score.value", "value"]) == [0.1, 0.2, 0.3, 0.4, 0.5]


def test_sweep_validates_every_value_before_running(tmp_path):
    nb = write_tiny(tmp_path / "nbs")
    with pytest.raises(ParameterError, match=r"'n' parameter of notebook tiny must be an int in \[1, 10\]"):
        sweep.run_sweep(str(nb), {"n": ["2", "11"]}, out_dir=tmp_path / "s")
    assert not (tmp_path / "s").exists()


@pytest.mark.notebook
def test_cli_sweep_of_notebook_05_over_three_lambdas_local_and_ray(tmp_path, capsys, ray_cluster):
    # the sweep's ray_session runs its points on the Ray that ray_cluster started (one for the Ray tests)
    lambdas = ["0.0", "0.5", "1.0"]  # three points on two jobs: one job runs two of them
    for backend in ("local", "ray"):
        out = tmp_path / backend
        # one-value axes keep each point small: one split seed, the random split
        assert main(["sweep", "05_pefa_lambda", "-p", "lambdas", *lambdas, "-p", "n_seeds", "1", "-p", "splits",
                     "[random]", "--profile", "quick", "--backend", backend, "--jobs", "2", "--out", str(out)]) == 0
        points = pd.read_csv(out / "points.csv")
        assert len(points) == 3 and (points["status"] == "ok").all(), points[["status", "error"]]
        table = pd.read_parquet(out / "results.parquet")
        assert table["point"].nunique() == 3 and {"point", "lambdas", "metric", "value"} <= set(table.columns)
        assert sorted(json.loads(v)[0] for v in table["lambdas"].unique()) == [0.0, 0.5, 1.0]
    local, ray = (pd.read_parquet(tmp_path / b / "results.parquet") for b in ("local", "ray"))
    recall = lambda t: t[t["metric"].str.endswith(".recall")].sort_values(["point", "metric"])["value"].to_numpy()
    assert (recall(local) == recall(ray)).all()  # the backend does not change the numbers
