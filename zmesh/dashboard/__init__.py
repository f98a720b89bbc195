"""The web dashboard and Prometheus endpoint of a mesh (`zmesh dashboard`).

It runs in a process of its own, so nothing of it loads into drivers, workers or nodes:
it asks the nodes what `zmesh status` asks them (members, actors, pending work, leases,
stores, groups, task spans, counters) and serves a plain page that polls `/api/state`.
"""
