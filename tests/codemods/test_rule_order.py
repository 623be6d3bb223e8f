"""The order of ``RULES`` matters only where a rule reads what another one proposed; every such pair is named here.

A rule asks the plan what it needs to know about the program (the same answer whoever asks first) and reads
from the edits what other rules already did. So an order is right when each rule comes after the rules whose
edits it reads: ``MUST_FOLLOW`` names those pairs, each with the reason. The list respects them all, and two
orders as far from the list as the pairs allow (every rule as early as it may go, then as late) convert every
rule example exactly as the list does, and the first of them every corpus input too.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from accelify.codemods.engine import transform as engine
from accelify.codemods.engine.rule import Rule
from accelify.codemods.rules import RULES
from accelify.pipeline import convert_source
from accelify.program import ModuleText
from corpus_cases import case_modules

ALL = tuple(rule.name for rule in RULES)
CORPUS = Path(__file__).resolve().parents[2] / "corpus"

# (earlier rules, later rules, why the later ones read the earlier ones' edits)
MUST_FOLLOW: tuple[tuple[tuple[str, ...], tuple[str, ...], str], ...] = (
    (("lightning",), ("unsupported",), "the first refusal names the reason: PyTorch Lightning trains the program"),
    (("unsupported",), ("model_parallel",), "... then distributed calls with no counterpart"),
    (("model_parallel",), ("forward_methods",), "... then a model split across devices"),
    (("forward_methods",), ("refusals",), "... then training through a model method that runs the forward"),
    (("refusals",), ("plan_warnings",),
     "... then what the plan cannot prepare, before anything is created; what it leaves as it is is reported only once "
     "nothing was refused (a refused file reports its refusals alone)"),
    (("plan_warnings",), ("accelerator",), "those warnings stand beside the refusal of any later rule"),
    (("accelerator",), tuple(n for n in ALL if n not in ("lightning", "unsupported", "model_parallel", "forward_methods",
                                                          "refusals", "plan_warnings", "accelerator")),
     "they convert only once an edit creates the accelerator, and read its name where it is (ctx.accelerating, "
     "ctx.accelerator_in)"),
    (("evaluation", "averages", "gathered_sums"), ("plateau_metrics",),
     "the value a plateau scheduler is stepped with agrees once the evaluation's gathers and the averages' reductions "
     "are in (ctx.agreement reads them from the edits)"),
    (("threading",), ("named_parameters",),
     "a helper the accelerator is threaded into unwraps what it saves itself; one without it is handed the unwrapped "
     "model (ctx.accelerator_in)"),
    (("named_parameters",), ("save", "writes"),
     "a model handed unwrapped to a helper that reads its state_dict is edited inside the call the save and writes "
     "rules then keep to the main process (an edit inside a statement goes before the one that wraps it)"),
    (("placement", "data_parallel", "ddp", "sampler", "collectives", "process_group", "spawn", "ranks", "amp", "tracing"),
     ("threading",),
     "threading passes the accelerator to the helpers whose edits write it (replace_through: ctx.readers()) and "
     "turns a device parameter whose uses the edits dropped into the accelerator"),
    (("shared_files", "logging"), ("threading",),
     "threading passes the accelerator to a helper whose start-up files or logging set-up they gated through it "
     "(regroup_through)"),
    (("micro_steps",), ("threading",),
     "micro_steps converts a micro-step loop only where the accelerator already is when it runs (the home)"),
    (("threading",), ("device", "tensors", "prepare", "backward", "clipping", "accumulation", "closure", "evaluation",
                      "averages", "plateau_metrics", "trigger", "print", "loguru", "cuda_types", "progress", "save", "writes", "gathered_shapes", "startup", "seeds", "unwrap_module", "load",
                      "attributes", "dataset_files"),
     "they write the accelerator's name in helpers as they go (ctx.accelerator_in), so the helpers must have it; the "
     "device rule also reads which uses of the device threading dropped"),
    (("placement", "data_parallel", "ddp", "sampler"), ("process_group",),
     "a set-up branch goes whole only when the edits already removed its placement, wraps and samplers"),
    (("placement", "data_parallel", "ddp", "sampler", "collectives", "process_group", "spawn"), ("ranks",),
     "a rank test inside code those rules removed or replaced is left alone"),
    (("apex",), ("amp",), "amp reports the apex calls the apex rule did not replace (ACC005)"),
    (("evaluation",), ("gathered_shapes",), "it reshapes what the evaluation rule gathered (the agreement's gathers)"),
    (("evaluation",), ("gathered_sums", "averages", "trigger", "startup", "seeds", "save", "load", "writes", "host_copies", "gated_backward",
                      "dataset_files"),
     "the agreement they ask is built when first asked, from the gathers the evaluation rule inserted"),
    (("placement", "data_parallel", "ddp", "sampler", "collectives", "process_group", "spawn", "device", "apex", "amp"),
     ("shared_draws",), "the seed goes before a statement that stays: it reads which statements their edits removed"),
    (("save", "writes"), ("dataset_files",),
     "a data set's construction that reaches a barrier another rule put in stays out of main_process_first (the "
     "collectives are read from the edits)"),
    (("dataset_files",), ("startup",),
     "a construction already under main_process_first (the dataset_files rule's) is not wrapped again"),
    (("shared_draws",), ("gated_backward",), "it reports nothing where the shared-draws rule seeded the draws alike"),
    (tuple(n for n in ALL if n not in ("unused_imports", "leftovers")), ("unused_imports",),
     "it drops the imports nothing reads once every other edit applies"),
    (tuple(n for n in ALL if n != "leftovers"), ("leftovers",), "it reports what no rule took, from all the edits"),
)
PAIRS = {(earlier, later) for firsts, lasts, _ in MUST_FOLLOW for earlier in firsts for later in lasts}


def ordered(pairs: set[tuple[str, str]], prefer: list[str]) -> list[str]:
    """A topological order of the rules under ``pairs``, taking the first ready rule of ``prefer`` each time."""
    done: list[str] = []
    while len(done) < len(prefer):
        ready = [n for n in prefer if n not in done and all(a in done for a, b in pairs if b == n)]
        assert ready, "the pairs make a cycle"
        done.append(ready[0])
    return done


def test_every_pair_names_real_rules() -> None:
    assert {name for pair in PAIRS for name in pair} <= set(ALL)


def test_the_list_respects_every_pair() -> None:
    position = {name: i for i, name in enumerate(ALL)}
    assert [(a, b) for a, b in sorted(PAIRS) if position[a] > position[b]] == []


def _cases(corpus: bool = True) -> list[tuple[str, str, str, list[ModuleText] | None, str, tuple[str, ...] | None]]:
    """(id, source, target, modules, expected text, expected warnings or None) for every example and (with
    ``corpus``) every corpus input."""
    out: list[tuple[str, str, str, list[ModuleText] | None, str, tuple[str, ...] | None]] = []
    for rule in RULES:
        for i, example in enumerate(rule.examples):
            modules = [ModuleText(path[:-3], path, before) for path, before, _ in example.module_texts]
            out.append((f"{rule.name}-{i}", example.source, example.target, modules or None, example.expected,
                        tuple(sorted(example.warnings))))
    for case in sorted(p.parent for p in CORPUS.glob("*/input.py")) if corpus else ():
        modules = case_modules(case)
        out.append((case.name, (case / "input.py").read_text(encoding="utf-8"), "accelify", modules,
                    (case / "expected.py").read_text(encoding="utf-8"), None))
    return out


@pytest.mark.parametrize("late", [False, True], ids=["each-as-early-as-it-may", "each-as-late-as-it-may"])
def test_any_order_the_pairs_allow_converts_the_same(late: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    by_name: dict[str, type[Rule]] = {rule.name: rule for rule in RULES}
    if late:  # schedule from the end: each rule goes as late as the pairs let it
        names = list(reversed(ordered({(b, a) for a, b in PAIRS}, list(ALL))))
    else:
        names = ordered(PAIRS, list(reversed(ALL)))
    assert names != list(ALL)
    monkeypatch.setattr(engine, "RULES", tuple(by_name[n] for n in names))
    different = []
    # the corpus (the whole programs, the slow part) in the order farthest from the list's head; the rule examples,
    # each made to show one rule's edits beside the others', in both
    for name, source, target, modules, expected, warnings in _cases(corpus=not late):
        result = convert_source(source, target=target, modules=modules if modules is not None else [])
        found = tuple(sorted([f"{w.code}:{w.line}" for w in result.warnings]
                             + [f"{w.code}:{c.path}:{w.line}" for c in result.companions for w in c.warnings]))
        if result.new != expected or (warnings is not None and found != warnings):
            different.append(name)
    assert different == [], f"in the order {names}"
