"""pickle5 keeps cloudpickle's answer for importable classes (pickled by reference), and still
pickles a class that is not importable (a local one) by value, every time."""

from __future__ import annotations

import pickle
from collections import OrderedDict

from zmesh.serializers import pickle5


def test_an_importable_class_is_looked_up_once_and_pickled_by_reference() -> None:
    value = OrderedDict(a=1)
    first = pickle5.dumps(value)
    assert OrderedDict in pickle5._BY_REFERENCE
    assert pickle5.dumps(value) == first  # the same bytes: by reference, as before
    assert pickle.loads(first) == value


def test_a_local_class_is_still_pickled_by_value() -> None:
    class Local:
        def __init__(self, x: int) -> None:
            self.x = x

    data = pickle5.dumps(Local(3))
    assert Local not in pickle5._BY_REFERENCE
    assert pickle.loads(pickle5.dumps(Local(4))).x == 4
    assert pickle.loads(data).x == 3
