"""discovery.Registry: the one name-keyed registry (task kinds, datasets, model loaders, attributors)."""
import pytest

from palrp_bench.discovery import Registry
from palrp_bench.errors import BadInputError


def test_register_lookup_and_one_line_error_naming_the_choices():
    reg = Registry("widget", "task.widget")

    @reg.register("b")
    def b():
        return 2

    reg.register("a")(int)
    assert reg.names() == ["a", "b"] and reg.lookup("b") is b
    with pytest.raises(BadInputError) as err:
        reg.lookup("c", " (task t)")
    assert str(err.value) == "unknown widget 'c' (task t) -- set task.widget to one of: a, b"
    plain = Registry("thing")  # no config key selects it: the fix names the choices only
    plain.register("x")(int)
    with pytest.raises(BadInputError) as err:
        plain.lookup("y")
    assert str(err.value) == "unknown thing 'y' -- use one of: x"


def test_a_package_registry_imports_its_modules_before_reading_names():
    from palrp_bench.evaluation.tasks import TASK_KINDS

    assert TASK_KINDS.package == "palrp_bench.evaluation.tasks"
    assert {"text_classification", "next_token", "image_classification", "image_segmentation"} <= set(TASK_KINDS.names())
