"""Root conftest: fixtures shared by every test directory.

Being the rootmost conftest (tests/ has no __init__.py), pytest puts tests/ on sys.path, so
helper modules such as `transport_fixtures` are imported by name from test modules.
"""

pytest_plugins = ["transport_fixtures", "runtime_fixtures"]
