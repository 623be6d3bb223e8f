"""The agreement's answer for values kept in a holder over a prepared loader (``losses.append(loss.item())``), which
it shares with the running-value analysis (ACC028), and the one place every rule asks before it inserts a collective
(``Agreement.collective_place``): never under a test the processes may decide differently."""

from __future__ import annotations

import textwrap

import libcst as cst

from _convert import converted, dedent
from accelify.codemods.analysis.agreement import Agreement
from accelify.codemods.analysis.collect import collect
from accelify.codemods.analysis.kept_values import kept_value
from accelify.codemods.analysis.plan import Plan
from accelify.pipeline import convert_source
from accelify.verify.deadlocks import latent_deadlocks

PREPARED = """\
import numpy as np
import torch
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator


def main():
    accelerator = Accelerator()
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader_train = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=2)
    loader_valid = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=2)
    loaders = {"train": loader_train, "valid": loader_valid}
    model, optimizer, loader_train, loader_valid = accelerator.prepare(model, optimizer, loader_train, loader_valid)
    loaders = {"train": loader_train, "valid": loader_valid}
    best = 1.0
"""


class _NoEdits:
    removed: set = set()
    holders: dict = {}

    def inserted(self) -> list:
        return []

    def replacement_of(self, node: cst.CSTNode) -> None:
        return None


def _uniform_tests(body: str, helpers: str = "", header: str = PREPARED) -> dict[str, bool]:
    """Each ``if`` test of ``header + body`` (a converted program, read as verify reads it; ``helpers`` after
    ``main``), and whether the agreement finds it the same on every process."""
    facts = collect(cst.parse_module(header + textwrap.indent(dedent(body), "    ") + "\n\n" + dedent(helpers)))
    agreement = Agreement(facts, Plan(facts), _NoEdits())
    main = next(s for s in facts.scopes if s.name == "main")
    code = cst.Module([]).code_for_node
    return {code(s.test): agreement.uniform(main, s.test, s) for s in facts.order if isinstance(s, cst.If)}


def test_a_list_appended_over_a_prepared_loader_is_each_process_own() -> None:
    tests = _uniform_tests("""
        for epoch in range(2):
            losses, marks = [], []
            for x, y in loader_valid:
                losses.append(model(x).sum().item())
                marks.append(1)
            if np.mean(losses) < best:
                best = np.mean(losses)
            if np.mean(marks) < 2:
                print(epoch)
    """)
    assert tests == {"np.mean(losses) < best": False, "np.mean(marks) < 2": True}


def test_a_loop_over_a_dict_of_loaders_rebuilt_after_prepare_walks_the_prepared_ones() -> None:
    """``loaders[phase]`` reads the dict bound last before the loop (the one made again after ``prepare``), so its
    batches are each process's own, and so is what is kept from them."""
    tests = _uniform_tests("""
        for epoch in range(2):
            for phase in ["train", "valid"]:
                preds = []
                for x, y in loaders[phase]:
                    preds.extend([p for p in model(x).detach().numpy()])
                if phase == "valid":
                    if np.mean(preds) < best:
                        best = 0.0
    """)
    assert tests == {'phase == "valid"': True, "np.mean(preds) < best": False}


def test_a_loader_taken_from_a_dict_or_tuple_of_prepared_loaders_hands_out_local_batches() -> None:
    """``for phase, loader in loaders.items()`` (or over a tuple of prepared loaders), then ``for x, y in loader``: the
    batches are each process's own, whichever loader the pass walks; a dict made only before ``prepare`` holds the
    loaders every process walks whole, so what is kept from them agrees."""
    walks = {"loaders.items()": False, "(loader_train, loader_valid)": False}
    for walked in walks:
        target = "phase, loader" if "items" in walked else "loader"
        tests = _uniform_tests(f"""
            for {target} in {walked}:
                losses = []
                for x, y in loader:
                    losses.append(model(x).sum().item())
                if np.mean(losses) < best:
                    best = 0.0
        """)
        walks[walked] = tests["np.mean(losses) < best"]
    assert walks == {"loaders.items()": False, "(loader_train, loader_valid)": False}
    before_prepare = PREPARED.replace('    loaders = {"train": loader_train, "valid": loader_valid}\n    best', "    best")
    early = _uniform_tests("""
        for phase, loader in loaders.items():
            losses = []
            for x, y in loader:
                losses.append(model(x).sum().item())
            if np.mean(losses) < best:
                best = 0.0
    """, header=before_prepare)
    assert early == {"np.mean(losses) < best": True}


def test_a_list_gathered_after_the_loop_agrees_again() -> None:
    tests = _uniform_tests("""
        losses = []
        for x, y in loader_valid:
            losses.append(model(x).sum().item())
        losses = accelerator.gather(torch.tensor(losses, device=accelerator.device)).tolist()
        if np.mean(losses) < best:
            best = 0.0
    """)
    assert tests == {"np.mean(losses) < best": True}


def test_a_helper_that_keeps_what_it_is_handed_returns_a_local_value() -> None:
    """``dsc_per_volume(validation_pred, ...)`` appends a score per volume of the process's predictions."""
    tests = _uniform_tests("""
        preds = []
        for x, y in loader_valid:
            preds.append(model(x).sum().item())
        if np.mean(scores(preds)) < best:
            best = 0.0
    """, """
        def scores(preds):
            out = []
            for p in preds:
                out.append(p * 2)
            return out
    """)
    assert tests == {"np.mean(scores(preds)) < best": False}


def test_the_running_values_and_the_agreement_read_one_answer() -> None:
    stmt = cst.parse_statement('meters["loss"].update(loss.item(), x.size(0))\n')
    kept = kept_value(stmt)
    assert kept is not None and kept.key == "meters" and kept.keyed and len(kept.values) == 2
    assert kept_value(cst.parse_statement("self.history.append(loss)\n")).key == "self.history"  # type: ignore[union-attr]
    assert kept_value(cst.parse_statement("x = losses.append(1)\n")) is None
    assert kept_value(cst.parse_statement("a.b.c.append(1)\n")) is None


HEAD = """\
import numpy as np
import torch
from torch.utils.data import DataLoader, TensorDataset
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=2)
"""
LOOP = HEAD + """\
best = float("inf")
for epoch in range(2):
    losses = []
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append([loss.item()])
"""


def test_the_save_barrier_goes_before_the_if_of_an_elif_on_a_local_score() -> None:
    new = converted(LOOP + textwrap.indent(dedent("""
            if epoch == 0:
                print("first")
            elif np.mean(losses) < best:
                best = np.mean(losses)
                torch.save(model.state_dict(), "best.pt")
        """), "    "))
    assert "        losses.append([loss.item()])\n    accelerator.wait_for_everyone()\n    if epoch == 0:\n" in new, new
    assert new.count("wait_for_everyone") == 1
    assert latent_deadlocks(("train.py", new)) == []


def test_no_barrier_where_no_place_is_reached_alike() -> None:
    """A save in a helper called under a test on the local score: a barrier in the helper would hang, and one
    before the call would not be in the helper's function: none (the save is right without it)."""
    new = converted(LOOP.replace("best = float", 'def keep(model):\n    torch.save(model.state_dict(), "b.pt")\n\n\nbest = float')
                    + textwrap.indent(dedent("""
            if np.mean(losses) < best:
                best = np.mean(losses)
                keep(model)
        """), "    "))
    assert "accelerator.save(accelerator.unwrap_model(model).state_dict()" in new and "wait_for_everyone" not in new, new
    assert latent_deadlocks(("train.py", new)) == []


def test_a_gather_is_not_inserted_under_a_test_on_a_local_value() -> None:
    """An evaluation run only when the process's last loss is small: a gather there would leave the processes that
    skip it waiting, so the metric is reported as each process's own (ACC016) and nothing is gathered."""
    result = convert_source(HEAD + dedent("""
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
        if loss.item() < 1.0:
            correct = 0
            with torch.no_grad():
                for x, y in loader:
                    out = model(x)
                    correct += ((out > 0) == (y > 0)).sum().item()
            print(correct)
        """))
    assert "gather" not in result.new and "ACC016" in [w.code for w in result.warnings], result.new
    assert latent_deadlocks(("train.py", result.new)) == []


def test_no_check_trigger_in_a_loop_some_processes_do_not_run() -> None:
    """A training loop run only when the process's last loss is small, left early on its own loss: the
    ``check_trigger()`` after its body would be reached by the processes that run it only, so it is refused."""
    result = convert_source(HEAD + dedent("""
        loss = torch.nn.functional.mse_loss(model(torch.randn(2, 2)), torch.randn(2, 1))
        for epoch in range(2):
            for x, y in loader:
                loss = torch.nn.functional.mse_loss(model(x), y)
                loss.backward()
                optimizer.step()
            if loss.item() < 5:
                for x, y in loader:
                    loss = torch.nn.functional.mse_loss(model(x), y)
                    loss.backward()
                    optimizer.step()
                    if loss.item() < 0.1:
                        break
        """))
    assert result.status == "attention" and [f"{w.code}:{w.line}" for w in result.warnings] == ["ACC017:19"], result.warnings


def test_a_load_of_a_file_saved_under_the_same_local_test_is_reported() -> None:
    """Saved then read back under a test on the process's own score: a barrier between the two would sit under the
    test (main put one there: a hang), and none can go before the test (it would come before the write), so the
    load is left as is and reported (ACC049), and the save's own barrier goes before the test."""
    result = convert_source(LOOP + textwrap.indent(dedent("""
        if np.mean(losses) < best:
            best = np.mean(losses)
            torch.save(model.state_dict(), "best.pt")
            model.load_state_dict(torch.load("best.pt"))
    """), "    "))
    assert [f"{w.code}:{w.line}" for w in result.warnings] == ["ACC028:14", "ACC049:18"], result.warnings
    assert "        losses.append([loss.item()])\n    accelerator.wait_for_everyone()\n    if np.mean" in result.new, result.new
    assert result.new.count("wait_for_everyone") == 1 and latent_deadlocks(("train.py", result.new)) == []


def test_a_comprehension_variable_is_an_item_of_what_it_walks_not_the_function_variable_of_its_name() -> None:
    """cleanrl's ``[make_env(args.seed + i, ...) for i in range(args.num_envs)]`` beside a loop ``for i in
    range(target_pmfs.size(0))`` over a process's own batch: the seeds agree (the seeds rule offsets them by the
    process index), whatever the function's own ``i`` holds."""
    tests = _uniform_tests("""
        for i in range(model(torch.randn(2, 2)).sum().int().item()):
            print(i)
        seeds = [7 + i for i in range(3)]
        if seeds[0] > 1:
            print(seeds)
        if i > 1:
            print(i)
    """)
    assert tests == {"seeds[0] > 1": True, "i > 1": False}


def test_a_batch_or_none_is_none_on_every_process_alike() -> None:
    """J3's test_epoch: ``target = target if len(target) > 0 else None`` (a data set whose items carry an empty
    target), then ``if target is not None: target = accelerator.gather_for_metrics(target)``. A collated batch is
    never None and never empty unless every item's part is: every process takes that branch alike, and verify's
    static check no longer calls the gather a latent deadlock. The loop rebinds ``target`` each pass, so the gathered
    value of the previous pass does not reach the test. A value test, a size other than emptiness or a choice made
    by a process's own value stays local."""
    tests = _uniform_tests("""
        for x, target in loader_valid:
            target = target if len(target) > 0 else None
            if target is not None:
                target = accelerator.gather_for_metrics(target)
            if len(x) > 0:
                print(1)
            if target.sum() > 0:
                print(2)
            if len(target) > 1:
                print(3)
            other = x if x.sum() > 0 else None
            if other is None:
                print(4)
    """)
    assert tests == {"target is not None": True, "len(x) > 0": True, "target.sum() > 0": False,
                     "len(target) > 1": False, "other is None": False}, tests
    found = [d.format() for d in latent_deadlocks(("train.py", PREPARED + textwrap.indent(dedent("""
        for x, target in loader_valid:
            target = target if len(target) > 0 else None
            if target is not None:
                target = accelerator.gather_for_metrics(target)
        """), "    ")))]
    assert found == [], found
