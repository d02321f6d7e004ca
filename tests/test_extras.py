"""An optional package a feature imports where it is used, when it is not installed, is one MissingExtra naming
the feature, the package and the extra that brings it (``collage.extras.require``)."""
import sys

import pytest

from collage.errors import CollageError
from collage.extras import MissingExtra, require
from collage.cost_models.learned import _xgboost
from collage.measure.executor import _ray
from collage.measure.postgres import _psycopg


@pytest.mark.parametrize("load, module, text", [
    (_ray, "ray", "--cluster needs ray: pip install 'collage[cluster]'"),
    (_psycopg, "psycopg", "a postgresql:// cost database needs psycopg: pip install 'collage[cluster]'"),
    (_xgboost, "xgboost", "the learned cost model needs xgboost: pip install 'collage[tune]'"),
])
def test_a_missing_optional_package_names_its_extra(monkeypatch, load, module, text):
    monkeypatch.setitem(sys.modules, module, None)  # import raises ImportError
    with pytest.raises(MissingExtra) as e:
        load()
    assert str(e.value).startswith(text)
    assert isinstance(e.value, CollageError) and isinstance(e.value, ImportError)  # the CLI's one line, exit 2


def test_an_installed_package_is_returned():
    assert require("onnx", "a test") is sys.modules["onnx"]
