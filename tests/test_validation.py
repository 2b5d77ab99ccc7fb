"""xenbench._validation: every check keeps ParameterError's message format."""
import re

import numpy as np
import pytest

from xenbench._validation import (PY_INT, check_array, check_choice, check_float, check_int, check_is_fitted,
                                  check_seed, is_float, is_int)
from xenbench.errors import NotFittedError, ParameterError


def _msg(name, expected, got, owner):
    return re.escape(f"The {name!r} parameter of {owner} must be {expected}. Got {got!r} instead.")


@pytest.mark.parametrize("value, lo, hi, hi_text, expected", [
    (0, 1, 10, "n_items", "an int in [1, n_items]"),
    (11, 1, 10, None, "an int in [1, 10]"),
    (0, 1, None, None, "an int >= 1"),
    (True, 0, None, None, "an int >= 0"),
    (1.0, 0, None, None, "an int >= 0"),
    ("3", 0, 5, "n=5", "an int in [0, n=5]"),
])
def test_check_int_rejects_with_todays_message(value, lo, hi, hi_text, expected):
    with pytest.raises(ParameterError, match=_msg("k", expected, value, "f")):
        check_int(value, "k", lo, hi, "f", hi_text)


def test_check_int_accepts_and_converts():
    assert check_int(np.int64(3), "k", 1, 3, "f") == 3 and type(check_int(np.int64(3), "k", 1, 3, "f")) is int
    assert check_int(None, "k", 1, None, "f", allow_none=True) is None
    with pytest.raises(ParameterError, match=_msg("k", "None or an int >= 1", 0, "f")):
        check_int(0, "k", 1, None, "f", allow_none=True)
    with pytest.raises(ParameterError, match=_msg("k", "an int >= 1", np.int64(2), "f")):
        check_int(np.int64(2), "k", 1, None, "f", types=PY_INT)
    with pytest.raises(ParameterError, match=_msg("seed", "a non-negative int", -1, "f")):
        check_seed(-1, "f")


@pytest.mark.parametrize("value, lo, hi, closed, expected", [
    (1.5, 0, 1, "both", "a float in [0, 1]"),
    (0, 0, 1, "neither", "a float in (0, 1)"),
    (0.0, 0, 1, "right", "a float in (0, 1]"),
    (0, 0, None, "neither", "a float > 0"),
    (-1, 0, None, "both", "a float >= 0"),
    (float("nan"), 0, 1, "both", "a float in [0, 1]"),
    (False, 0, 1, "both", "a float in [0, 1]"),
    (np.float32(0.5), 0, 1, "both", "a float in [0, 1]"),  # NumPy floats other than float64 only with NP_REAL_TYPES
])
def test_check_float_rejects_with_todays_message(value, lo, hi, closed, expected):
    with pytest.raises(ParameterError, match=_msg("lam", expected, value, "f")):
        check_float(value, "lam", lo, hi, "f", closed=closed)


def test_predicates_match_the_checks():
    assert is_int(3, 1, 3) and not is_int(True) and not is_int(4, 1, 3) and is_int(np.int8(2))
    assert is_float(1, 0, 1) and not is_float(1, 0, 1, closed="left") and not is_float(float("nan"), 0, None)


def test_check_choice():
    assert check_choice("gram", "solver", ("gram", "pinv"), "AdaCur") == "gram"
    with pytest.raises(ParameterError, match=_msg("solver", "one of ('gram', 'pinv')", "svd", "AdaCur")):
        check_choice("svd", "solver", ("gram", "pinv"), "AdaCur")
    with pytest.raises(ParameterError, match=_msg("backend", "'local' or 'ray'", "x", "f")):
        check_choice("x", "backend", ("local", "ray"), "f", expected="'local' or 'ray'")


def test_check_array():
    X = np.ones((2, 3))
    assert check_array(X, "X", "f") is X
    with pytest.raises(ParameterError, match=_msg("X", "a finite, non-empty float array with 2 dimensions",
                                                  "int64 array of shape (2, 3)", "f")):
        check_array(np.ones((2, 3), np.int64), "X", "f")
    with pytest.raises(ParameterError, match=_msg("X", "E", "float64 array of shape (2, 3)", "f")):
        check_array(X, "X", "f", shape=(None, 4), expected="E")
    with pytest.raises(ParameterError, match=_msg("X", "E", "float64 array of shape (0, 3)", "f")):
        check_array(np.ones((0, 3)), "X", "f", expected="E")
    bad = X.copy()
    bad[0, 0] = np.nan
    with pytest.raises(ParameterError, match=_msg("X", "E", "float64 array of shape (2, 3)", "f")):
        check_array(bad, "X", "f", expected="E")
    with pytest.raises(ParameterError, match=_msg("X", "finite", "an array with NaN or inf", "f")):
        check_array(bad, "X", "f", expected="E", finite_expected="finite")
    assert check_array(np.arange(3), "i", "f", ndim=1, kind="i").dtype.kind == "i"
    with pytest.raises(ParameterError):
        check_array(np.array(["a", "b"]).reshape(1, 2), "X", "f")  # not a float: no isfinite on strings


def test_check_is_fitted():
    class Est:
        pass

    est = Est()
    with pytest.raises(NotFittedError, match=re.escape("This Est instance is not fitted yet; call fit(X) first.")):
        check_is_fitted(est, "coef_", "fit(X)")
    with pytest.raises(NotFittedError, match=re.escape("Est.search needs an index; call add(codes) first.")):
        check_is_fitted(est, ("a_", "b_"), "add(codes)", what="Est.search needs an index")
    est.coef_ = 1
    check_is_fitted(est, "coef_", "fit(X)")
    assert issubclass(NotFittedError, AttributeError)
