"""Where the ``Accelerator`` is created (the plan's decision 4): the prepare scope, or the caller that built some of
the objects and passed them in, or first thing in ``__init__`` for a trainer whose method prepares what it was built
with (``analysis/prepare_site.py`` chooses the prepare scope first)."""

from __future__ import annotations

import libcst as cst

from accelify.codemods.analysis.blocks import common_block
from accelify.codemods.analysis.facts import Binding, CallSite, Scope
from accelify.codemods.analysis.prepared_uses import Alias
from accelify.codemods.analysis.problems import SELF_TRAINING_MODULE
from accelify.codemods.analysis.trainer_choice import View
from accelify.codemods.analysis.trainer_method import TrainerMethod


class AcceleratorHome(TrainerMethod):
    """The plan's choice of the accelerator's home (``Plan`` mixes it in through ``PrepareSite``, which sets the
    prepare scope, block and aliases this reads)."""

    objects: list[Binding]
    prepare_scope: Scope | None
    prepare_block: list[cst.BaseStatement]
    accelerator_block: list[cst.BaseStatement] | None
    aliases: list[Alias]
    home: Scope | None
    home_block: list[cst.BaseStatement]
    home_call: CallSite | None
    view: View | None
    function_sites: list  # ``training_functions.FunctionSite``
    function_caller: Scope | None

    def _choose_home(self) -> None:
        scope = self.prepare_scope
        assert scope is not None
        via: list[CallSite] = []
        if self.function_sites and self.function_caller is not None:
            # several training functions, each preparing its own: the accelerator where they are all called from
            scope = self.function_caller
            via = sorted((s for f in [self.prepare_scope, *(site.scope for site in self.function_sites)]
                          for s in self.call_sites(f)), key=lambda s: self.facts.order[s.stmt][0])
        if scope.class_scope is None:
            while True:
                sites = self.run_sites(scope)  # (not a kept experiment's call)
                callers = {id(site.scope) for site in sites}
                if not sites or len(callers) != 1 or sites[0].scope.kind == "class":
                    break  # called from several places (or none): the accelerator is made where prepare is
                caller = sites[0].scope
                if not all(self._feeds(caller, site, scope) for site in sites) or (
                        self.view is not None and not self.view.trainer.holds(caller)):
                    break  # (one of several trainers makes its accelerator itself, not in the code they share)
                scope, via = caller, sites  # ``train_model(model, device)``, and its retry after an OOM
        init = self._constructed(scope) if scope.class_scope is not None else None
        if init is not None and any((a.stmt is None and a.key.startswith("self.")) or self._handed_to_init(a, init, scope)
                                    for a in self.aliases):
            # prepare goes first thing in ``train(self, loader)``; the accelerator first thing in ``__init__``, where
            # the other methods (``check_cuda``, a print) may already read it
            self.home, self.home_call, self.home_block = init, None, init.body
            return
        if scope.class_scope is not None and _torch_module_class(scope.class_scope.name, self.facts.classes):
            # forward-forward style: each layer makes and steps its own optimizer in a method of its own
            self._problem(SELF_TRAINING_MODULE, scope.node, name=f"{scope.class_scope.name}.{scope.name}")
        self.home, self.home_call = scope, (via[0] if via else None)
        # several branches that train, each with its prepare: the accelerator before their ``if``
        own = self.accelerator_block if self.accelerator_block is not None else self.prepare_block
        self.home_block = own if not via else common_block(self.facts, scope, [s.stmt for s in via])

    def _handed_to_init(self, alias: Alias, init: Scope, method: Scope) -> bool:
        """minGPT's ``Trainer.run``: ``model, config = self.model, self.config`` names the model ``__init__`` stored
        (built by the caller and handed in), and ``run`` builds the optimizer and loader itself; prepare goes in
        ``run`` after them, the accelerator first thing in ``__init__``, where ``self.device`` is chosen."""
        if alias.obj.role != "model" or alias.obj.where is method or alias.stmt is None:
            return False
        return any(self.holds(b) is alias.obj for bindings in init.class_scope.bindings.values()  # type: ignore[union-attr]
                   for b in bindings if b.where is init and b.key.startswith("self."))

    def _feeds(self, caller: Scope, site: CallSite, callee: Scope) -> bool:
        """Whether ``caller`` builds one of the prepared objects or the device it passes to ``callee``."""
        for arg in site.node.args:
            if arg.star:
                continue
            found = self.origin(caller, arg.value)
            if found is not None and found.where is caller and (found in self.objects or found.role == "device"):
                return True
        return False

    def _constructed(self, method: Scope) -> Scope | None:
        """For the method that trains an object (``model.train(train_loader)`` in main, WGAN-GP's layout), called once,
        outside any loop, from outside its class, whose class binds its objects on ``self`` in ``__init__`` alone (or
        in builders ``__init__`` calls once) and never again: that ``__init__``. Prepare can then go first thing in
        the method, with the loader it receives."""
        cls = method.class_scope
        if cls is None or method.name == "__init__" or _torch_module_class(cls.name, self.facts.classes):
            return None  # (a module that trains itself is no trainer: ACC026)
        if self.own_objects(method):
            # ``train(self)`` builds the optimizer and loaders for the model ``__init__`` built: prepare goes after them
            init = self.facts.function("__init__", cls)
            return init if init is not None and self.trains(method) and self.why_not_once(method, init) is None else None
        if not method.param_names[1:]:
            return None
        sites = self.call_sites(method)
        if len(sites) != 1 or sites[0].loop is not None or sites[0].scope.class_scope is cls:
            return None
        if not any(self.reaches_backward(site) for site in method.calls):
            return None
        init = self.facts.function("__init__", cls)
        if init is None:
            return None
        for bindings in cls.bindings.values():
            for binding in bindings:
                builder = self.builder_call(binding.where) if binding.where is not init else None
                if binding.role is not None and binding.where is not init and (builder is None or builder.scope is not init):
                    return None  # an object bound again elsewhere (a ``load_model`` that builds it anew)
        return init


def _torch_module_class(name: str, classes: dict[str, list[str]], seen: frozenset[str] = frozenset()) -> bool:
    """Whether the class ``name`` of the program subclasses a ``torch.nn`` class (``nn.Module``, ``nn.Linear``...)."""
    return any(
        base.startswith("torch.nn.") or (base not in seen and _torch_module_class(base, classes, seen | {name}))
        for base in classes.get(name, [])
    )
