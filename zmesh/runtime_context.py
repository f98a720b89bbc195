"""`get_runtime_context()`: who and where the caller is (node, job, task, actor ids)."""

from __future__ import annotations

import os
from typing import Any

from zmesh.runtime import context


class HexId(str):
    """An id as Ray's NodeID/JobID/TaskID/ActorID: its hex string, with `.hex()` and
    `.binary()` so code written for either form works."""

    def hex(self) -> str:
        return str(self)

    def binary(self) -> bytes:
        return bytes.fromhex(str(self))

    def is_nil(self) -> bool:
        return not str(self).strip("0")


class RuntimeContext:
    """Ids and resources of the current process, task or actor."""

    def __init__(self, client: Any) -> None:
        self._client = client

    def get_node_id(self) -> str:
        return str(self._client.node_id)

    def get_job_id(self) -> str:
        return str(self._client.job_id)

    def get_task_id(self) -> str | None:
        tid = self._client.current_task_id
        return tid.hex() if tid else None

    def get_actor_id(self) -> str | None:
        aid = self._client.current_actor_id
        return aid.hex() if aid else None

    def get_worker_id(self) -> str:
        return str(self._client.worker_id.hex())

    def get_namespace(self) -> str:
        return str(self._client.namespace)

    def get_assigned_resources(self) -> dict[str, float]:
        return dict(getattr(self._client, "assigned_resources", {}) or {})

    def get_accelerator_ids(self) -> dict[str, list[str]]:
        return {"GPU": [str(g) for g in get_gpu_ids()]}

    def get(self) -> dict[str, Any]:
        """Ray's deprecated dict form: job, node and namespace; task and actor ids in a
        worker that runs one."""
        out: dict[str, Any] = {"job_id": self.job_id, "node_id": self.node_id,
                               "namespace": self.namespace}
        if self.task_id is not None:
            out["task_id"] = self.task_id
        if self.actor_id is not None:
            out["actor_id"] = self.actor_id
        return out

    @property
    def node_id(self) -> HexId:
        return HexId(self.get_node_id())

    @property
    def job_id(self) -> HexId:
        return HexId(self.get_job_id())

    @property
    def task_id(self) -> HexId | None:
        tid = self.get_task_id()
        return None if tid is None else HexId(tid)

    @property
    def actor_id(self) -> HexId | None:
        aid = self.get_actor_id()
        return None if aid is None else HexId(aid)

    @property
    def current_actor(self) -> Any:
        """A handle to the actor this code runs in; RuntimeError outside an actor."""
        aid = self._client.current_actor_id
        if not aid:
            raise RuntimeError("current_actor is only available in an actor")
        from zmesh.actor import ActorHandle, _method_opts, _method_table

        cls = getattr(self._client, "current_actor_class", None)
        methods = _method_table(cls) if cls is not None else {}
        return ActorHandle(aid, getattr(cls, "__name__", "actor"), methods,
                           method_opts=_method_opts(cls) if cls is not None else None)

    @property
    def namespace(self) -> str:
        return self.get_namespace()

    @property
    def was_current_actor_reconstructed(self) -> bool:
        return bool(getattr(self._client, "actor_restarts", 0))


def get_runtime_context() -> RuntimeContext:
    """The runtime context of the calling process."""
    return RuntimeContext(context.current_client())


def get_gpu_ids() -> list[int]:
    """GPU ids assigned to this worker (from CUDA_VISIBLE_DEVICES), as Ray's get_gpu_ids()."""
    value = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    return [int(x) for x in value.split(",") if x.strip().isdigit()]
