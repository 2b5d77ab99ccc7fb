"""All exceptions live in xenbench.errors; their old import paths keep working."""
import pytest

import xenbench.errors as errors


@pytest.mark.parametrize("module, name", [("xenbench.methods.cur", "NotFittedError"),
                                          ("xenbench.metrics", "BudgetExceededError")])
def test_old_import_paths_are_the_same_class(module, name):
    import importlib

    assert getattr(importlib.import_module(module), name) is getattr(errors, name)
    assert getattr(errors, name).__module__ == "xenbench.errors"


def test_every_error_is_a_xenbench_error_and_a_builtin():
    assert issubclass(errors.NotFittedError, (errors.XenbenchError, AttributeError))
    assert issubclass(errors.BudgetExceededError, errors.XenbenchError)
    assert issubclass(errors.BudgetExceededError, RuntimeError)
    assert issubclass(errors.ParameterError, ValueError) and issubclass(errors.DataError, ValueError)


def test_no_exception_class_is_defined_outside_errors():
    import ast
    from pathlib import Path

    root = Path(errors.__file__).parent
    found = []
    for path in sorted(root.rglob("*.py")):
        if path.name == "errors.py" and path.parent == root:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and any(
                    (isinstance(b, ast.Name) and (b.id.endswith("Error") or b.id == "Exception"))
                    or (isinstance(b, ast.Attribute) and b.attr.endswith("Error")) for b in node.bases):
                found.append(f"{path.relative_to(root)}:{node.lineno} {node.name}")
    assert not found, f"exception classes outside xenbench/errors.py: {found}"
