"""The drainer's pipeline as plain objects: settings, actor names, the sink contract,
the sequence gate, the coordinator's logic and one step of the merger's loop.

The Ray actors in ``actors/`` are shells around these classes; every Ray call they
need is passed in (``actors/ray_calls.py`` implements them), so everything here is
unit-tested without Ray. See README.md in this folder.
"""
