"""The task graph of a program and what a task-based schedule of it would take.

* :mod:`.graph`: :class:`~.graph.Task` (a kernel: its time alone and the resources it uses) and
  :class:`~.graph.TaskGraph` (nodes in a topological order, edges the true dependencies);
* :mod:`.make`: :func:`~.make.build`, the graph of a :class:`~mhlo_cost.roofline.estimate.Roofline` under its
  execution model, from the walk's data flow (weights and optimizer state versioned in a training step);
* :mod:`.schedule`: the critical path, slack, and a list schedule on ``k`` streams that share the chip;
* :mod:`.scenarios`: a training step run task by task (two iterations overlapped, ops cut into chunks).

The graph's export (DOT, a JSON node/edge list) is a view: :mod:`mhlo_cost.views.tasks`.
"""
from __future__ import annotations

from .make import build
from .graph import RESOURCES, Task, TaskGraph
from .schedule import Path, Schedule, bottom_levels, critical_path, list_schedule

__all__ = ["RESOURCES", "Path", "Schedule", "Task", "TaskGraph", "bottom_levels", "build", "critical_path",
           "list_schedule"]
