"""runtime_env `working_dir` and `py_modules`, as Ray's "Environment Dependencies"
(ray-core/handling-dependencies.rst) describes them: the directory's files are available to
tasks and actors (the working directory is their cwd and importable), `py_modules` are
importable; unsupported keys are refused with an error naming them.
"""

from __future__ import annotations

import os

import pytest


def _write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def test_working_dir_is_the_tasks_cwd_and_importable(ray, tmp_path):
    # handling-dependencies.rst "Using Local Files": with working_dir, the task reads
    # "hello.txt" by relative path (the doc: print(open("hello.txt").read()) -> "Hello World!")
    _write(str(tmp_path / "hello.txt"), "Hello World!")
    _write(str(tmp_path / "helper_mod_everyday.py"), "VALUE = 41\n")

    @ray.remote(runtime_env={"working_dir": str(tmp_path)})
    def f():
        import helper_mod_everyday

        with open("hello.txt") as fh:
            return fh.read(), helper_mod_everyday.VALUE + 1

    assert ray.get(f.remote()) == ("Hello World!", 42)

    @ray.remote
    def g():
        return os.path.exists("hello.txt")

    assert ray.get(g.remote()) is False  # other tasks do not see it


def test_py_modules_are_importable_in_tasks_and_actors(ray, tmp_path):
    # handling-dependencies.rst "Library Development": py_modules=[my_module] makes the
    # local package importable on the workers
    pkg = tmp_path / "my_everyday_pkg"
    _write(str(pkg / "__init__.py"), "def greet():\n    return 'hi from my_everyday_pkg'\n")

    @ray.remote(runtime_env={"py_modules": [str(pkg)]})
    def f():
        import my_everyday_pkg

        return my_everyday_pkg.greet()

    assert ray.get(f.remote()) == "hi from my_everyday_pkg"

    @ray.remote(runtime_env={"py_modules": [str(pkg)]})
    class A:
        def greet(self):
            import my_everyday_pkg

            return my_everyday_pkg.greet()

    a = A.remote()
    assert ray.get(a.greet.remote()) == "hi from my_everyday_pkg"
    ray.kill(a)


def test_unsupported_runtime_env_keys_are_refused_by_name(ray, tmp_path):
    with pytest.raises(ValueError, match=r"\['pip'\] not supported"):
        @ray.remote(runtime_env={"pip": ["requests"]})
        def f():
            return 1
    with pytest.raises(ValueError, match="working_dir must be a local directory"):
        @ray.remote(runtime_env={"working_dir": str(tmp_path / "missing")})
        def g():
            return 1
