"""verl 0.9.1's single controller runs unchanged on zmesh (Ray-compat mode), on CPU with
fake GPUs: the seed's worker-group program, every execute_* path, the dispatch modes,
colocated and fused worker classes, from_detached, and a gloo all-reduce at the
MASTER_ADDR/MASTER_PORT verl hands its workers.

verl is installed with --no-deps (plus tensordict, omegaconf and transformers: the imports
of `verl.single_controller.ray`) by .ci/run; without it these tests skip, except in CI.
"""

from __future__ import annotations

import importlib.util
import os

import pytest
from test_ray_compat import run_program

if importlib.util.find_spec("verl") is None:
    if os.environ.get("CI"):
        raise RuntimeError("verl is not installed: .ci/run installs verl==0.9.1 --no-deps")
    pytest.skip("verl is not installed (pip install --no-deps verl==0.9.1 tensordict==0.10.0 "
                "and zmesh[verl-test])", allow_module_level=True)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def results() -> dict:
    # every worker imports verl (and transformers): one program run covers every case
    return run_program(["-m", "zmesh.ray_compat", "verl_worker_groups.py"], timeout=840)


def test_the_seed_worker_group_runs(results):
    assert results["ray_is_zmesh"] is True
    assert results["world_size"] == 2
    assert results["execute_all_sync"] == [[1.0], [4.0]]  # ranks 0 and 1, plus [1, 3]


def test_execute_all_async_and_rank_zero(results):
    assert results["execute_all_async"] == [[1.0], [4.0]]
    assert results["execute_rank_zero_sync"] == [1.0]
    assert results["execute_rank_zero"] == [1.0]


def test_workers_are_alive_per_the_state_api_and_hold_fake_gpus(results):
    assert results["worker_alive"] == [True, True]
    assert results["accelerator_ids"] not in ("", "not set")


def test_dispatch_modes(results):
    assert results["one_to_all"] == [[10.0], [11.0]]
    assert results["all_to_all"] == [20.0, 33.0]
    assert results["dp_compute"] == [9, 17]
    assert results["dp_compute_proto"] == [0.0, 2.0, 5.0, 7.0]
    assert results["rank_zero"] == 0


def test_gloo_allreduce_at_verls_master_address(results):
    assert results["gloo_allreduce"] == [3.0, 3.0]


def test_underscore_methods_on_handles(results):
    assert results["private_method"] == ["private 0", "private 1"]


def test_from_detached(results):
    assert results["from_detached"] == [[1.0], [2.0]]  # a fresh group: rank + 1
    assert results["named_actors"] is True


def test_colocated_worker_classes(results):
    assert results["colocated_actor"] == [0.0] * 5 + [1.0] * 5
    assert results["colocated_critic"] == [-10.0] * 10
    assert results["fused_actor"] == [0.0, 0.0, 1.0, 1.0]
