#!/bin/bash
# copy a tree to $2 and add perf_counter stamps (scratch only, never committed)
set -e
rm -rf "$2"; mkdir -p "$2"
(cd "$1" && tar --exclude=.git --exclude=./zmesh/transports --exclude=./zmesh/serializers -cf - .) | tar -xf - -C "$2"
cd "$2"; ln -s ../transports zmesh/transports; ln -s ../serializers zmesh/serializers
cat > zmesh/_tl.py <<'EOF'
import time
STAMPS: list = []
def s(label: str) -> None:
    STAMPS.append((label, time.perf_counter()))
EOF
python3 - <<'EOF'
import re
T = "from zmesh import _tl; "
def stamp_after(path, pattern, label, before=False):
    src = open(path).read()
    lines = src.split("\n")
    hits = [i for i, l in enumerate(lines) if pattern in l]
    assert len(hits) == 1, (path, pattern, hits)
    i = hits[0]
    indent = re.match(r"\s*", lines[i + (0 if before else 0)]).group(0)
    if before:
        lines.insert(i, indent + T + f"_tl.s({label!r})")
    else:
        # after a simple statement line
        lines.insert(i + 1, indent + T + f"_tl.s({label!r})")
    open(path, "w").write("\n".join(lines))
A = "zmesh/runtime/owner/actor_calls.py"
stamp_after(A, "call = self.calls.get(action.task_id)", "D_send")
stamp_after(A, "self.resends.sent(action.address, msg)", "D_msg_pre")
stamp_after(A, "                    self.client.send_direct(action.address, msg)", "D_msg_direct")
stamp_after(A, "call.pushes = tensor_push.scan(resolved)", "D_resolved")
P = "zmesh/tensor_transport/push.py"
stamp_after(P, '"""A caller asks for a push (client loop thread): post it, or do nothing."""', "P_order")
stamp_after(P, "        self.pushed += 1", "P_posted")
stamp_after(P, "            done = lane.armed.popleft()", "P_sent")
stamp_after(P, "                client.loop.send(address, msg)", "D_qsent")
E = "zmesh/runtime/worker/executor.py"
stamp_after(E, "def _on_call(self, sender: str, msg: m.ActorCall, bufs: list[Any]) -> None:", "C_call")
stamp_after(E, "            receive_early(msg.args)", "C_early")
C = "zmesh/tensor_transport/consumer.py"
stamp_after(C, "                self.waiting.wait(p.IDLE_WAIT)", "C_header")
stamp_after(C, "                    self.came.notify_all()\n", "C_posted") if False else None
stamp_after(C, "            pair.push.wait_for(key)  # the caller ordered a push", "C_waited")
stamp_after(C, "    pushed_reads += 1", "C_recvd")
V = "zmesh/tensor_transport/value.py"
stamp_after(V, "    from zmesh.tensor_transport.consumer import fetch", "C_mat")
EOF
