"""`runtime_env`'s `working_dir` and `py_modules`: local code shipped to the workers.

The caller zips each directory (or module) once per content, puts the zip in the object
store and keeps the ref for the life of its process; the task's environment carries the
refs (`ZMESH_RUNTIME_ENV`). A worker fetches a package the first time its node needs it and
unpacks it under the node's session directory, named by content hash, so every worker of
that node reuses it. `working_dir` becomes the task's current directory and is importable;
each of `py_modules` is importable.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import sys
import threading
import types
from typing import Any

ENV_KEY = "ZMESH_RUNTIME_ENV"
SUPPORTED = {"env_vars", "working_dir", "py_modules"}
_SKIP_DIRS = {"__pycache__", ".git", ".venv", ".mypy_cache", ".pytest_cache"}
MAX_PACKAGE_BYTES = 512 * 1024 * 1024

_lock = threading.Lock()
_packages: dict[str, Any] = {}  # content hash -> the ref that keeps the zip alive (caller)


def check(env: dict[str, Any]) -> None:
    """Refuse keys zmesh does not support and values it cannot use, naming them."""
    unknown = set(env) - SUPPORTED
    if unknown:
        raise ValueError(f"runtime_env: {sorted(unknown)} not supported by zmesh; supported "
                         f"keys: {sorted(SUPPORTED)}")
    wd = env.get("working_dir")
    if wd is not None and (not isinstance(wd, str) or not os.path.isdir(wd)):
        raise ValueError(f"runtime_env working_dir must be a local directory, got {wd!r}")
    mods = env.get("py_modules")
    if mods is not None:
        if not isinstance(mods, list):
            raise TypeError(f"runtime_env py_modules must be a list, got {mods!r}")
        for mod in mods:
            _module_path(mod)


def _module_path(mod: Any) -> str:
    if isinstance(mod, types.ModuleType):
        path = getattr(mod, "__file__", None) or ""
        return os.path.dirname(path) if os.path.basename(path) == "__init__.py" else path
    if isinstance(mod, str) and (os.path.isdir(mod) or (os.path.isfile(mod) and
                                                        mod.endswith(".py"))):
        return mod
    raise ValueError(f"runtime_env py_modules entries must be modules, local package "
                     f"directories or .py files, got {mod!r}")


def _zip(path: str, keep_dir_name: bool) -> bytes:
    import zipfile  # (here, not at import: every worker imports this module)

    buf = io.BytesIO()
    root = os.path.abspath(path)
    base = os.path.dirname(root) if keep_dir_name else root
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        if os.path.isfile(root):
            zf.write(root, os.path.basename(root))
        for dirpath, dirnames, filenames in sorted(os.walk(root)) if os.path.isdir(root) else []:
            dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS)
            for name in sorted(filenames):
                full = os.path.join(dirpath, name)
                info = zipfile.ZipInfo(os.path.relpath(full, base), (1980, 1, 1, 0, 0, 0))
                with open(full, "rb") as f:
                    zf.writestr(info, f.read())
    data = buf.getvalue()
    if len(data) > MAX_PACKAGE_BYTES:
        raise ValueError(f"runtime_env package {path!r} is {len(data)} bytes zipped; the "
                         f"limit is {MAX_PACKAGE_BYTES}")
    return data


def _package(client: Any, path: str, keep_dir_name: bool) -> list[str]:
    """[hash, object id hex, owner] of the zip of `path`, put once per content."""
    data = _zip(path, keep_dir_name)
    digest = hashlib.sha1(data).hexdigest()
    with _lock:
        ref = _packages.get(digest)
        if ref is None or ref._client is not client:
            ref = _packages[digest] = client.put(data)
    return [digest, ref.id.hex(), ref.owner]


def env_vars(client: Any, env: dict[str, Any]) -> dict[str, str]:
    """The environment variable that carries this runtime_env's packages ({} if none)."""
    if not env.get("working_dir") and not env.get("py_modules"):
        return {}
    check(env)
    spec: dict[str, Any] = {}
    if env.get("working_dir"):
        spec["working_dir"] = _package(client, env["working_dir"], keep_dir_name=False)
    mods = env.get("py_modules") or []
    spec["py_modules"] = [_package(client, _module_path(mod), keep_dir_name=True)
                          for mod in mods]
    return {ENV_KEY: json.dumps(spec, sort_keys=True)}


# -- worker side ---------------------------------------------------------------------------
def _unpacked(client: Any, entry: list[str]) -> str:
    """The directory holding the package `entry` on this node, fetched on first use."""
    import tempfile
    import zipfile

    from zmesh.object_ref import ObjectRef

    digest, oid_hex, owner = entry
    root = os.path.join(client.session_dir or tempfile.gettempdir(), "runtime_env")
    target = os.path.join(root, digest)
    if os.path.isdir(target):
        return target
    ref = ObjectRef(bytes.fromhex(oid_hex), owner, client)
    data = client.get([ref], 300)[0]
    del ref
    os.makedirs(root, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f".{digest}-", dir=root)
    with zipfile.ZipFile(io.BytesIO(bytes(data))) as zf:
        zf.extractall(tmp)
    try:
        os.rename(tmp, target)  # atomic: another worker of this node may have won the race
    except OSError:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    return target


def enter(client: Any, env: dict[str, str]) -> Any:
    """Make the packages in `env` usable in this worker; returns what `leave` restores."""
    raw = env.get(ENV_KEY)
    if not raw:
        return None
    spec = json.loads(raw)
    saved = (os.getcwd(), list(sys.path))
    for entry in spec.get("py_modules") or []:
        sys.path.insert(0, _unpacked(client, entry))
    if spec.get("working_dir"):
        wd = _unpacked(client, spec["working_dir"])
        sys.path.insert(0, wd)
        os.chdir(wd)
    return saved


def leave(saved: Any) -> None:
    """Undo `enter` after a task (a worker runs tasks of other environments next)."""
    if saved is None:
        return
    cwd, path = saved
    os.chdir(cwd)
    sys.path[:] = path
