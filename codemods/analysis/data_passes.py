"""Which loops and functions decide what is prepared: a loop that yields batches to the training, a function nothing
calls (a bystander), a function's own pass over data (statistics), an evaluation that writes a file per item, an
evaluation that handles each batch of one as its sample.
``Plan`` mixes it in and asks while it collects
the objects to prepare (``Plan._find_objects``)."""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from accelify.codemods.analysis.batch_groups import first_row
from accelify.codemods.analysis.pass_index import indexed_subscript
from accelify.codemods.analysis.facts import Binding, CallSite, Loop, Scope
from accelify.codemods.analysis.names import dotted
from accelify.codemods.analysis.prepared_uses import PreparedUses
from accelify.codemods.analysis.snippets import code_of
from accelify.codemods.analysis.trainer_choice import View
from accelify.codemods.analysis.write_calls import writes_file


class DataPasses(PreparedUses):
    """The plan's questions about loops over data that do not train themselves."""

    _bystanders: set[int] | None
    view: View | None

    def _feeds_training(self, loop: Loop) -> bool:
        """Whether ``loop`` yields its batches to a function that trains (``get_infinite_batches(loader)``, a
        generator whose ``for images, _ in loader: yield images`` feeds WGAN-GP's ``train`` through ``next``)."""
        if not m.findall(loop.node.body, m.Yield()):
            return False
        return any(any(self.reaches_backward(other) for other in site.scope.calls) for site in self.call_sites(loop.scope))

    def bystander(self, scope: Scope) -> bool:
        """Whether ``scope`` is a module-level function nothing in the program refers to (no call, no name read,
        no attribute of that name) while the script's own top level trains: the training never runs it (a
        ``sanity_check()`` kept for debugging by hand), so it does not decide what is prepared or refused."""
        if self.view is not None and any(t.holds(scope) for t in self.view.others):
            return True  # another trainer's class, when one of several trainers chosen by a flag is converted
        if self._bystanders is None:
            self._bystanders = self._find_bystanders()
        return id(_outermost(scope)) in self._bystanders  # a function nested in a bystander is one too

    def _find_bystanders(self) -> set[int]:
        entry = self.facts.module_scope
        if not any(self.reaches_backward(site) for site in entry.calls):
            return set()  # no training entry in the script itself (a library, a main() called from elsewhere)
        found = {id(scope) for scope in self.facts.scopes if self.never_run(scope)}
        outside = [o for o in [b for b in self.facts.bindings() if b.role == "optimizer"] if id(_outermost(o.where)) not in found]
        return found if outside else set()  # what trains is all in them: the script's entry is elsewhere

    def _data_pass(self, loader: Binding) -> bool:
        """A loader a function builds, walks and keeps to itself, without training or touching a model or an
        optimizer (``compute_mean_std(dataset)`` in a helper module, called before training or never): a pass
        over data, not training data. Unprepared, every process walks all of it, as the original did, so each
        computes the same statistics; and a function the training never calls does not decide whether the
        training converts."""
        where = loader.where
        if where.kind != "function" or where.class_scope is not None or loader.loop is not None or "." in loader.key:
            return False
        if any(self.reaches_backward(site) for site in where.calls):
            return False
        if any(b.role in ("model", "optimizer", "scheduler") for found in where.bindings.values() for b in found):
            return False  # the function builds what trains: its loader is the training's
        loops = [lp for lp in self.facts.loops if lp.scope is where and dotted(self.loop_source(lp)) == loader.key]
        if not loops:
            return False
        walked = {id(lp.node) for lp in loops}
        for ref in where.refs.get(loader.key, []):
            holder = where.holders.get(id(ref))
            if holder is None or (id(holder) not in walked and f"len({loader.key})" not in code_of(holder)):
                return False  # returned, stored or passed on: someone else may train on it
        for loop in loops:
            for site in loop.calls:
                found = self.origin(loop.scope, site.node.func) if isinstance(site.node.func, cst.Name) else None
                if found is not None and found.role in ("model", "optimizer"):
                    return False
        return True


    def _written_out(self, loader: Binding, loops: list[Loop]) -> bool:
        """An evaluation loader whose loop writes files as it walks (``save_img(model(x)[0], f"out_{i}.png")`` for
        each test item, in the loop or in a function it calls): prepared, each process walks its share, and the
        write, kept to the main process, leaves the other processes' items unwritten (unguarded, the processes
        would write different items under the same names). Left unprepared, every process walks all of it, as the
        original did, and the main process writes every item (what the loop computes besides is then whole on
        every process too)."""
        return self._evaluated_alone(loader, loops) and any(self._writes(site, 2) for lp in loops for site in lp.calls)

    def _per_sample(self, loader: Binding, loops: list[Loop]) -> bool:
        """An evaluation loader whose loop handles each batch as the one sample it holds: it asserts so (``assert
        lr.shape[0] == 1``), or it is built with batch size 1 (``ToPILImage()(sr.squeeze())``, a PSNR per image:
        SRGAN's validation). Prepared, the loop's outputs would be gathered and hold N samples
        where that code expects one (a crash, or a metric of N images at once); the statements cannot be run per
        sample in general (an image saved for ``image_id == 0``, values of the pass that are this process's). Left
        unprepared, every process walks all of it, as the original did, and what the loop computes is the
        original's on every process."""
        if not self._evaluated_alone(loader, loops):
            return False
        # a batch size read from elsewhere: only an assert says it is one. A loader of one sample per batch that only
        # evaluation walks is left as it is in any case (set W's W7): prepared, its last round is completed with
        # duplicates (even batches), which a count reduced after the loop counts again (6 of 5 right); gathered, the
        # samples may differ in shape (N4's sentences)
        return _batch_of_one(loader.value) or any(_asserts_one(lp.node.body) for lp in loops)

    def _pass_indexed(self, loader: Binding, loops: list[Loop]) -> bool:
        """An evaluation loader whose loop pairs a list of its own with each batch by the loop's index
        (``names[index]`` beside each prediction: set U's U1, ``analysis/pass_index.py``). Prepared, each process
        would count its own batches from 0 and pair them with other items; left unprepared, every process walks all
        of it, as the original did, and its writes and prints run on the main process."""
        return self._evaluated_alone(loader, loops) and any(indexed_subscript(lp) is not None for lp in loops)

    def _grouped(self, loader: Binding, loops: list[Loop]) -> bool:
        """An evaluation loader whose loop takes each batch as one group whose first row is special (``item[0]``, the
        NCF evaluation: ``analysis/batch_groups.py``): left out of ``prepare``, every process walks all of it, as the
        original did, and the per-batch values are the original's."""
        return self._evaluated_alone(loader, loops) and any(first_row(lp) is not None for lp in loops)

    def _evaluated_alone(self, loader: Binding, loops: list[Loop]) -> bool:
        """Whether ``loops`` (those that walk ``loader``) evaluate only (nothing in them trains), and no function that
        walks it is handed another loader too (``evaluate(model, loader)`` also handed a prepared one: it would gather
        one and not the other): such a loader may be left out of ``prepare``."""
        return self._only_evaluated(loops) and not any(self._shared_walk(lp, loader) for lp in self.facts.loops)

    def _only_evaluated(self, loops: list[Loop]) -> bool:
        """Whether there are ``loops`` and none of them trains or feeds a training."""
        return bool(loops) and not any(any(self.reaches_backward(s) for s in lp.calls) or self._feeds_training(lp)
                                       for lp in loops)

    def _walked_whole_elsewhere(self, loader: Binding, scope: Scope) -> bool:
        """An evaluation loader the prepare scope (``scope``) holds, walked by a function that another scope also hands
        a loader it built itself, as it built it (set V's V6: a trainer's ``evaluate(val_loader)``, called by
        ``train()``, where the loader would be prepared, and by the script after training, with the same loader or a
        test loader, for its final metrics). Prepared, one call would walk each process's shard and the other the
        whole set, and no one rewrite of the loop is right at both; left out of ``prepare``, every process walks all
        of it at every call, as the original did."""
        walked = [lp for lp in self.facts.loops if any(self.origin(lp.scope, s) is loader for s in self.walked_sources(lp))]
        if not self._only_evaluated(walked):
            return False
        for loop in walked:
            source = self.loop_source(loop)
            function = loop.scope
            if function is scope or not isinstance(source, cst.Name) or source.value not in function.param_names:
                continue
            for site in self.run_sites(function):
                arg = self.arg_for(site, function, source.value)
                made = self.origin(site.scope, arg.value) if arg is not None and isinstance(arg.value, cst.Name) else None
                if site.scope is not scope and made is not None and made.role == "loader" and made.where is site.scope \
                        and made not in self.in_place:
                    return True
        return False

    def _shared_walk(self, loop: Loop, loader: Binding) -> bool:
        """Whether ``loop`` walks a parameter that some call hands ``loader`` and another call another object."""
        source = self.loop_source(loop)
        function = loop.scope
        if not (isinstance(source, cst.Name) and function.kind == "function" and source.value in function.param_names):
            return False
        passed = []
        for site in self.call_sites(function):
            arg = self.arg_for(site, function, source.value)
            passed.append(self.origin(site.scope, arg.value) if arg is not None else None)
        return any(p is loader for p in passed) and any(p is not loader for p in passed)

    def _writes(self, site: CallSite, depth: int) -> bool:
        if writes_file(site):
            return True
        callee = self.callee(site)
        return depth > 0 and callee is not None and any(self._writes(s, depth - 1) for s in callee.calls)


def _batch_of_one(value: cst.BaseExpression | None) -> bool:
    """Whether ``value`` builds a ``DataLoader`` (or a subclass named ``...Loader``) of ``batch_size=1`` (keyword, or
    second argument)."""
    if not isinstance(value, cst.Call) or not (dotted(value.func) or "").endswith("Loader"):
        return False
    for index, arg in enumerate(value.args):
        keyword = arg.keyword.value if arg.keyword is not None else None
        if keyword == "batch_size" or (keyword is None and index == 1 and arg.star == ""):
            return isinstance(arg.value, cst.Integer) and arg.value.evaluated_value == 1
    return False


def _asserts_one(body: cst.CSTNode) -> bool:
    """Whether ``body`` asserts a batch of one (``assert x.shape[0] == 1``, ``x.size(0) == 1``, ``len(x) == 1``)."""
    for check in m.findall(body, m.Assert(test=m.Comparison())):
        test = check.test  # type: ignore[attr-defined]
        if len(test.comparisons) == 1 and isinstance(test.comparisons[0].operator, cst.Equal) \
                and m.matches(test.comparisons[0].comparator, m.Integer("1")) and _batch_length(test.left):
            return True
    return False


def _batch_length(expr: cst.BaseExpression) -> bool:
    """``x.shape[0]``, ``x.size(0)``, ``len(x)``."""
    return (
        m.matches(expr, m.Subscript(value=m.Attribute(attr=m.Name("shape")),
                                    slice=[m.SubscriptElement(slice=m.Index(value=m.Integer("0")))]))
        or m.matches(expr, m.Call(func=m.Attribute(attr=m.Name("size")), args=[m.Arg(value=m.Integer("0"))]))
        or m.matches(expr, m.Call(func=m.Name("len"), args=[m.Arg()]))
    )


def _outermost(scope: Scope) -> Scope:
    """The module-level function (or class) ``scope`` is in, or ``scope`` itself."""
    while scope.parent is not None and scope.parent.kind != "module":
        scope = scope.parent
    return scope
