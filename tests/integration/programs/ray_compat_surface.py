"""The Ray surface that libraries touch, used through `import ray` in Ray-compat mode.

Run either as `python -m zmesh.ray_compat ray_compat_surface.py` or, with `--init`, as a
plain script that calls `zmesh.init(ray_compat=True)` first. Prints one JSON line.
"""

import json
import sys

if "--init" in sys.argv:
    import zmesh

    zmesh.init(num_cpus=4, num_gpus=2, ray_compat=True)

import ray  # noqa: E402
from ray.experimental.state.api import get_actor  # noqa: E402
from ray.util.placement_group import placement_group  # noqa: E402
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy  # noqa: E402


def tag(fn):
    fn.magic = "registered"
    return fn


@ray.remote
class Probe:
    label = "class attribute"

    @tag
    def inside(self):
        import ray as ray_inside  # a library importing ray by name inside an actor
        import ray.util

        return {"module": ray_inside.__name__,
                "is_zmesh": ray_inside.get is __import__("zmesh").get,
                "ip": ray.util.get_node_ip_address(),
                "accelerators": ray_inside.get_runtime_context().get_accelerator_ids()}

    def _private(self):
        return "underscore methods are callable"


def main() -> None:
    if not ray.is_initialized():
        ray.init(num_cpus=4, num_gpus=2)
    out = {}
    out["dir_has_method"] = "inside" in dir(Probe) and "_private" in dir(Probe)
    out["getattr_attr"] = Probe.label
    out["getattr_magic"] = getattr(Probe.inside, "magic", None)
    out["actor_class"] = Probe.__ray_actor_class__.__name__
    out["is_actor_class"] = isinstance(Probe, ray.actor.ActorClass)
    h = Probe.options(name="probe", num_gpus=1).remote()
    out["is_handle"] = isinstance(h, ray.actor.ActorHandle)
    out["inside"] = ray.get(h.inside.remote())
    out["private"] = ray.get(h._private.remote())
    state = get_actor(h._actor_id.hex())
    out["state"] = state["state"] if state else None
    out["util_state"] = ray.util.state.get_actor(h._actor_id.hex())["class_name"]
    out["named"] = ray.util.list_named_actors()
    out["per_node"] = list(ray._private.state.available_resources_per_node().values())[0]["GPU"]
    pg = placement_group([{"CPU": 1}], strategy="STRICT_PACK")
    ray.get(pg.ready())
    table = ray._private.state.state.placement_group_table(pg.id)
    out["pg_node"] = table["bundles_to_node_id"][0] == ray.get_runtime_context().get_node_id()
    out["pg_task"] = ray.get(ray.remote(lambda: "in pg").options(
        scheduling_strategy=PlacementGroupSchedulingStrategy(pg, 0)).remote())
    ray.util.kv.kv_put("compat/key", b"value")
    out["kv"] = ray.util.kv.kv_get("compat/key").decode()
    ray.kill(h)
    print("RESULT " + json.dumps(out), flush=True)
    ray.shutdown()


main()
