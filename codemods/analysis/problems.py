"""What the plan can find it cannot settle: the kinds of problem (``Problem.kind``) and the record of one.
``rules/refusals.py`` gives each kind its warning code and decides whether it stops the conversion."""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

MODEL_IN_LOOP = "model_in_loop"  # a model or optimizer built inside a loop: refused
SCHEDULER_IN_LOOP = "scheduler_in_loop"  # a scheduler built inside a loop: left out of prepare
CREATED_AFTER_LOOP = "created_after_loop"  # an object created after training starts: refused
BUILT_ELSEWHERE = "built_elsewhere"  # no scope holds every object: refused
HELD_BY_A_METHOD = "held_by_a_method"  # a trainer method holds every object but may run more than once: refused
SEVERAL_TRAINERS = "several_trainers"  # several scopes each build a whole training of their own: refused
UNSHARDED = "unsharded"  # training walks a loader as it was before prepare: refused
UNKNOWN_DATA = "unknown_data"  # training walks data that cannot be followed
NOT_A_LOADER = "not_a_loader"  # training walks a library's batch iterator that prepare cannot shard: refused
SELF_TRAINING_MODULE = "self_training_module"  # a module that builds and steps its own optimizer: refused
MODELS_IN_A_COLLECTION = "models_in_a_collection"  # an optimizer trains models kept in a list: refused
REBUILT_BY_A_METHOD = "rebuilt_by_a_method"  # a builder method __init__ calls is called again elsewhere: refused
PENALTY_ALONE = "penalty_alone"  # a gradient penalty backwarded on its own through a prepared model: refused
SECOND_EXPERIMENT = "second_experiment"  # a name re-bound to a new object after training: a second experiment
TRAININGS_IN_BRANCHES = "trainings_in_branches"  # objects built in the branches of an ``if`` that trains in several


@dataclass(frozen=True)
class Problem:
    """Something the plan could not settle: what kind, the node to point at, the message fields, and
    whether it stops the conversion (``refuse``) or only warns."""

    kind: str
    node: cst.CSTNode
    fields: tuple[tuple[str, str], ...]
    refuse: bool = True
