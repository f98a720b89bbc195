"""An actor that creates and calls another actor (from the seed notebook).

    python examples/parent_child_actors.py
"""

import zmesh as ray

ray.init(num_cpus=2)


@ray.remote
class ChildActor:
    def do_work(self):
        return "Work done by child"


@ray.remote
class ParentActor:
    def create_child(self):
        self.child_actor = ChildActor.remote()

    def get_work(self):
        return ray.get(self.child_actor.do_work.remote())


parent_actor = ParentActor.remote()
print(parent_actor)
ray.get(parent_actor.create_child.remote())
print(ray.get(parent_actor.get_work.remote()))  # -> 'Work done by child'

ray.shutdown()
