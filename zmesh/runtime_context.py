"""`get_runtime_context()`: who and where the caller is (node, job, task, actor ids)."""

from __future__ import annotations

import os
from typing import Any

from zmesh.runtime import context


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

    @property
    def node_id(self) -> str:
        return self.get_node_id()

    @property
    def job_id(self) -> str:
        return self.get_job_id()

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
