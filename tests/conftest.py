"""Root conftest: fixtures shared by every test directory.

Being the rootmost conftest (tests/ has no __init__.py), pytest puts tests/ on sys.path, so
helper modules such as `transport_fixtures` are imported by name from test modules.
"""

pytest_plugins = ["transport_fixtures", "runtime_fixtures"]


def pytest_addoption(parser):
    parser.addoption("--slow", action="store_true", default=False,
                     help="also run long soaks (tests marked soak)")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--slow"):
        return
    import pytest

    skip = pytest.mark.skip(reason="a long soak: run with --slow")
    for item in items:
        if "soak" in item.keywords:
            item.add_marker(skip)
