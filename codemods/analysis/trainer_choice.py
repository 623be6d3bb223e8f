"""Several trainers chosen by a flag: when each can be converted on its own.

A model zoo's entry builds exactly one of its trainers per run (pytorch-generative-model-collections' ``main.py``)::

    if args.gan_type == 'GAN':
        gan = GAN(args)          # GAN.__init__ builds G, D, their optimizers and its loader
    elif args.gan_type == 'WGAN':
        gan = WGAN(args)
    gan.train()

One ``accelerator.prepare`` cannot serve the ten trainings, but a run only ever builds one of them: each trainer can
be converted on its own (its accelerator made in its own ``__init__``), and a process still creates one
``Accelerator``. That holds when every trainer is a module-level class (or function) built (called) at exactly one
place, those places all lie in one scope that runs once, in different branches of one ``if``/``elif`` chain (or of a
conditional expression), or all are built at one call that looks the class up in a dict of them (``GANS[key](args)``),
and every training step of the program (each ``backward``) is inside one of the trainers.
``choice`` says whether it holds and names the trainers' territories (the class or function statements each
conversion may change on its own).
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from accelify.codemods.analysis.facts import CallSite, Scope
from accelify.codemods.analysis.flow import Flow


@dataclass(frozen=True, eq=False)
class Trainer:
    """One of the trainers: the module-level class or function that is its territory, and the scope that builds its
    objects (``GAN.__init__``, or the function itself)."""

    territory: Scope
    home: Scope

    @property
    def name(self) -> str:
        return self.territory.name

    def holds(self, scope: Scope) -> bool:
        """Whether ``scope`` is the territory or nested in it (a method, a closure)."""
        return scope is self.territory or scope.inside(self.territory)


@dataclass(frozen=True, eq=False)
class View:
    """One trainer converted on its own: ``trainer``, and the ``others``, whose territories its plan leaves aside."""

    trainer: Trainer
    others: tuple[Trainer, ...]


def views(trainers: list[Trainer]) -> list[View]:
    """A view per trainer, in order."""
    return [View(t, tuple(o for o in trainers if o is not t)) for t in trainers]


def choice(flow: Flow, homes: list[Scope]) -> list[Trainer] | str | None:
    """The trainers whose objects ``homes`` build, when a run of the program builds at most one of them and each can be
    converted on its own (see the module docstring); why not (ACC039's ``why``) when a run builds one but they share
    code that trains; None when it cannot be shown that a run builds one."""
    trainers = []
    for home in homes:
        territory = home.class_scope if home.class_scope is not None else home
        if territory.parent is None or territory.parent.kind != "module":
            return None
        trainers.append(Trainer(territory, home))
    names = [(t.territory.unit, t.name) for t in trainers]
    if len(set(names)) != len(names) or not _one_per_run(flow, trainers):
        return None
    return _shared(flow, trainers) or trainers


def _one_per_run(flow: Flow, trainers: list[Trainer]) -> bool:
    """Whether a run builds at most one of ``trainers``: at one call looked up in a dict of them, or each at one
    place, all in one scope that runs once, in different branches of one ``if`` chain or conditional expression."""
    if _subcommands(flow, trainers):
        return True
    registry = _registry(flow, trainers)
    if registry is not None:
        return not flow.facts.looped(registry) and _runs_once(flow, registry.scope, frozenset())
    sites: list[CallSite] = []
    for trainer in trainers:
        built = flow.call_sites(_entry(flow, trainer))
        if len(built) != 1 or flow.facts.looped(built[0]) or any(t.holds(built[0].scope) for t in trainers):
            return False
        sites.append(built[0])
    scope = sites[0].scope
    if any(site.scope is not scope for site in sites) or not _runs_once(flow, scope, frozenset()):
        return False
    arms = _arms(scope.node, {site.node for site in sites})
    return all(_exclusive(arms.get(a.node, ()), arms.get(b.node, ())) for i, a in enumerate(sites) for b in sites[i + 1:])


def _subcommands(flow: Flow, trainers: list[Trainer]) -> bool:
    """Whether every trainer is a module-level function the program never calls itself, made a subcommand of one
    command-line group (``@cli.command()`` under ``@click.group() def cli()``, ``@app.command()`` of ``app =
    typer.Typer()``): the group runs the one subcommand a run names (set W's W8, SimCLR's ``supervised`` and
    ``unsupervised``)."""
    groups = set()
    for trainer in trainers:
        node = trainer.territory.node
        if trainer.territory.kind != "function" or not isinstance(node, cst.FunctionDef) \
                or flow.call_sites(trainer.territory):
            return False
        found = [d.decorator.func if isinstance(d.decorator, cst.Call) else d.decorator for d in node.decorators]
        heads = [f.value.value for f in found if isinstance(f, cst.Attribute) and f.attr.value == "command"
                 and isinstance(f.value, cst.Name)]
        if len(heads) != 1 or not _command_group(flow, trainer.territory, heads[0]):
            return False
        groups.add(heads[0])
    return len(groups) == 1


def _command_group(flow: Flow, scope: Scope, name: str) -> bool:
    """Whether ``name`` in the module of ``scope`` is a click group (a function decorated ``@click.group(...)``) or a
    ``typer.Typer()``."""
    module = scope.parent
    if module is None:
        return False
    for binding in module.bindings.get(name, []):
        value = binding.value
        if isinstance(value, cst.Call) and module.imports.qualname(value.func) == "typer.Typer":
            return True
    group = flow.facts.function(name, module)
    node = group.node if group is not None else None
    return isinstance(node, cst.FunctionDef) and any(
        module.imports.qualname(d.decorator.func if isinstance(d.decorator, cst.Call) else d.decorator)
        in ("click.group", "click.core.group") for d in node.decorators)


def _registry(flow: Flow, trainers: list[Trainer]) -> CallSite | None:
    """The one call that builds a trainer class looked up in a dict of exactly the trainers
    (``GANS = {'GAN': GAN, 'WGAN': WGAN}``, ``gan = GANS[args.gan_type](args)``), when no trainer is built elsewhere:
    a run builds one of them there. None otherwise."""
    if any(t.territory.kind != "class" or flow.call_sites(_entry(flow, t)) for t in trainers):
        return None
    wanted = {id(t.territory) for t in trainers}
    sites = [site for site in flow.facts.calls if isinstance(site.node.func, cst.Subscript)
             and (found := flow.classes.registered(site.scope, site.node.func))
             and {id(c) for c in found} == wanted and len(found) == len(wanted)]
    return sites[0] if len(sites) == 1 else None


def _entry(flow: Flow, trainer: Trainer) -> Scope:
    """What a run calls to build the trainer: its class's ``__init__``, or the function."""
    if trainer.territory.kind == "class":
        return flow.facts.function("__init__", trainer.territory) or trainer.home
    return trainer.territory


def _shared(flow: Flow, trainers: list[Trainer]) -> str | None:
    """Why the trainers cannot be converted one at a time: a ``backward`` outside every trainer (a training helper
    they share), or a trainer class that derives from a class of the program or is derived from (what the base runs,
    every trainer runs). None when neither."""
    for site in flow.facts.calls:
        if site.method == "backward" and not any(t.holds(site.scope) for t in trainers):
            return (f"and a run builds one of them, but `{site.scope.name}`, outside them, trains for them: converted one "
                    "at a time, each would change it its own way")
    for trainer in trainers:
        if trainer.territory.kind == "class":
            related = flow.classes.bases(trainer.territory) or flow.facts.subclasses(trainer.territory)
            if related:
                return (f"and a run builds one of them, but `{trainer.name}` and `{related[0].name}` are related classes "
                        "of the program: converted one at a time, each would change what the others run")
    return None


def _runs_once(flow: Flow, scope: Scope, seen: frozenset[int]) -> bool:
    """Whether ``scope`` runs at most once per process: the module's top level, or a function called at exactly one
    place, outside any loop, by a scope that runs once."""
    if scope.kind == "module":
        return True
    if scope.kind != "function" or id(scope) in seen:
        return False
    sites = flow.call_sites(scope)
    return len(sites) == 1 and not flow.facts.looped(sites[0]) and _runs_once(flow, sites[0].scope, seen | {id(scope)})


Arm = tuple[int, int]  # (the ``if`` chain or conditional expression, the branch taken)


def _arms(root: cst.CSTNode, calls: set[cst.Call]) -> dict[cst.Call, tuple[Arm, ...]]:
    """For each call of ``calls`` under ``root``, the branches of the ``if``/``elif`` chains and conditional
    expressions it lies in, outermost first (functions and classes defined inside are not entered)."""
    found: dict[cst.Call, tuple[Arm, ...]] = {}

    def walk(node: cst.CSTNode, path: tuple[Arm, ...]) -> None:
        if node in calls:
            found[node] = path  # type: ignore[index]
        if node is not root and isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            return
        if isinstance(node, cst.If):
            head, arm = id(node), 0
            branch: cst.CSTNode | None = node
            while isinstance(branch, cst.If):
                walk(branch.test, path)
                walk(branch.body, (*path, (head, arm)))
                branch, arm = branch.orelse, arm + 1
            if isinstance(branch, cst.Else):
                walk(branch.body, (*path, (head, arm)))
            return
        if isinstance(node, cst.IfExp):
            walk(node.test, path)
            walk(node.body, (*path, (id(node), 0)))
            walk(node.orelse, (*path, (id(node), 1)))
            return
        for child in node.children:
            walk(child, path)

    walk(root, ())
    return found


def _exclusive(a: tuple[Arm, ...], b: tuple[Arm, ...]) -> bool:
    """Whether two calls lie in different branches of one ``if`` chain (or conditional expression), so that at most
    one of them runs."""
    for (head_a, arm_a), (head_b, arm_b) in zip(a, b):
        if head_a != head_b:
            return False
        if arm_a != arm_b:
            return True
    return False
