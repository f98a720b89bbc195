"""The dashboard's single page: plain HTML and JavaScript, no build step.

It polls /api/state every second and redraws the tables; clicking an actor shows the log
lines of its worker (from /api/logs).
"""

PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>zmesh dashboard</title>
<style>
 body{font:14px system-ui,sans-serif;margin:1.2em;color:#222}
 h1{font-size:1.3em;margin:0 0 .2em} h2{font-size:1.05em;margin:1.2em 0 .3em}
 table{border-collapse:collapse;min-width:40em} td,th{padding:.2em .6em;border-bottom:1px solid #ddd;text-align:left}
 th{background:#f4f4f4} .alive{color:#080} .dead,.failed,.infeasible{color:#b00} .pending,.suspect{color:#a60}
 #status{color:#666} pre{background:#111;color:#eee;padding:.6em;max-height:20em;overflow:auto}
 tr.actor{cursor:pointer} tr.actor:hover{background:#eef}
</style></head><body>
<h1>zmesh dashboard</h1><div id="status">loading...</div>
<h2>Members</h2><table id="nodes"></table>
<h2>Actors</h2><table id="actors"></table>
<h2>Pending tasks</h2><table id="pending"></table>
<h2>Running</h2><table id="running"></table>
<h2>Failed</h2><table id="failed"></table>
<h2>Object stores</h2><table id="objects"></table>
<h2>Placement groups</h2><table id="groups"></table>
<h2 id="logtitle">Logs (click an actor)</h2><pre id="logs"></pre>
<script>
"use strict";
let chosen = null;
function esc(v){return String(v).replace(/[&<>"]/g,c=>({"&":"&amp;","<":"&lt;",">":"&gt;",'"':"&quot;"}[c]));}
function res(o){return Object.entries(o||{}).filter(([k])=>!k.startsWith("node:")&&!k.startsWith("memory")&&!k.startsWith("object_store"))
  .map(([k,v])=>k+"="+(Math.round(v*100)/100)).join(", ");}
function table(id, cols, rows, rowattrs){
  const t=document.getElementById(id);
  let h="<tr>"+cols.map(c=>"<th>"+esc(c[0])+"</th>").join("")+"</tr>";
  if(!rows.length){h+="<tr><td colspan="+cols.length+"><i>none</i></td></tr>";}
  for(const r of rows){
    h+="<tr "+(rowattrs?rowattrs(r):"")+">"+cols.map(c=>{const v=c[1](r);return "<td class=\\""+esc(v)+"\\">"+esc(v)+"</td>";}).join("")+"</tr>";
  }
  t.innerHTML=h;
}
async function refresh(){
  try{
    const r=await fetch("/api/state",{cache:"no-store"});
    if(!r.ok){throw new Error("HTTP "+r.status);}
    const s=await r.json();
    if(s.error){throw new Error(s.error);}
    table("nodes",[["node",n=>n.node_id.slice(0,12)],["state",n=>n.state],["address",n=>n.address],
      ["resources",n=>res(n.resources)],["available",n=>res(n.available)]],s.nodes);
    table("actors",[["actor",a=>a.actor_id.slice(0,12)],["class",a=>a.class_name],["name",a=>a.name||""],
      ["state",a=>a.state],["node",a=>(a.node_id||"?").slice(0,12)],["pid",a=>a.pid||""],["restarts",a=>a.restarts]],
      s.actors, a=>"class=\\"actor\\" data-node=\\""+esc(a.node_id)+"\\" data-pid=\\""+esc(a.pid)+"\\" data-name=\\""+esc(a.name||a.class_name)+"\\"");
    table("pending",[["task",p=>p.name],["kind",p=>p.kind],["state",p=>p.infeasible?"infeasible":"pending"],
      ["reason",p=>p.reason],["node",p=>p.node_id.slice(0,12)]],s.pending);
    table("running",[["task",l=>l.name],["owner",l=>l.owner],["node",l=>l.node_id.slice(0,12)]],s.running);
    table("failed",[["task",f=>f.name],["kind",f=>f.kind],["error",f=>f.error],["worker pid",f=>f.pid],
      ["node",f=>f.node_id.slice(0,12)]],s.failed);
    table("objects",[["node",o=>o.node_id.slice(0,12)],["used bytes",o=>o.used??""],
      ["capacity",o=>o.capacity??""],["objects",o=>o.num_objects??""],["spilled",o=>o.spilled_objects??""]],s.objects);
    table("groups",[["group",g=>g.placement_group_id.slice(0,12)],["name",g=>g.name||""],["strategy",g=>g.strategy],
      ["state",g=>g.state],["reason",g=>g.reason||""]],s.placement_groups);
    document.querySelectorAll("tr.actor").forEach(tr=>tr.onclick=()=>{chosen={node:tr.dataset.node,pid:tr.dataset.pid,name:tr.dataset.name};showLogs();});
    document.getElementById("status").textContent="updated "+new Date().toLocaleTimeString()+" - "+s.nodes.filter(n=>n.state==="alive").length+" live members";
  }catch(e){document.getElementById("status").textContent="cannot reach the mesh: "+e.message;}
}
async function showLogs(){
  if(!chosen||!chosen.pid){return;}
  const r=await fetch("/api/logs?node="+encodeURIComponent(chosen.node)+"&pid="+encodeURIComponent(chosen.pid),{cache:"no-store"});
  const got=await r.json();
  const lines=Object.values(got.files||{}).flatMap(f=>f.lines);
  document.getElementById("logtitle").textContent="Logs of "+chosen.name+" (pid "+chosen.pid+")";
  document.getElementById("logs").textContent=lines.slice(-500).join("\\n");
}
refresh(); setInterval(()=>{refresh(); showLogs();},1000);
</script></body></html>
"""
