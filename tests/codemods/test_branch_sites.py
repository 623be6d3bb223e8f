"""Where prepare goes when the training runs inside a branch (analysis/branch_sites.py): J4's research entry point
(peterliht/knowledge-distillation-pytorch) builds the loader, then under ``if "distill" in version:`` the student and
its optimizer in an ``if/elif`` per version, the teacher, and trains there. The corpus cases kd_student_per_version
and kd_builder_in_branch run it; these are the variants and the refusals."""

from __future__ import annotations

from _convert import codes, converted, dedent

from accelify.pipeline import convert_source

TRAIN = """\
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def train(model, optimizer, loader):
    for x, y in loader:
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randint(0, 2, (16,))), batch_size=4)
"""

STUDENTS = """\
    if version == "small":
        model = nn.Linear(4, 2)
        optimizer = torch.optim.Adam(model.parameters())
    elif version == "big":
        model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
"""

PREPARED = "    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)\n"


def test_a_with_block_that_builds_and_trains_is_prepared_inside_it() -> None:
    """The outer statement a ``with`` instead of an ``if``: prepare goes in its body, after the per-version chain
    (before, ACC020: prepare went after the ``with``, after the training)."""
    out = converted(TRAIN + "with torch.autograd.set_detect_anomaly(False):\n" + STUDENTS
                    + "    for epoch in range(2):\n        train(model, optimizer, loader)\n")
    assert out.count("accelerator.prepare(") == 1, out
    assert STUDENTS + PREPARED + "    for epoch in range(2):\n" in out, out


def test_a_model_and_optimizer_built_in_each_arm_of_an_if_elif_are_prepared_once_after_it() -> None:
    """No outer ``if``, no ``else``: the training right after the chain reads both names whenever it runs, so every
    run that trains has bound them. Before, each was prepared in the first arm only (the elif's optimizer in its own
    arm) and the elif's model trained unwrapped, as N copies that drift apart."""
    out = converted(TRAIN + STUDENTS.replace("\n    ", "\n").lstrip() + "for epoch in range(2):\n    train(model, optimizer, loader)\n")
    assert out.count("accelerator.prepare(") == 1, out
    assert "    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n" + PREPARED.lstrip() + "for epoch" in out, out


def test_two_branches_that_each_train_are_each_prepared_after_their_objects() -> None:
    """The full J4 program: ``if "distill" in version:`` trains with the teacher, its ``else`` trains without, each
    building the model and optimizer in its own chain. Each branch gets the prepare after its objects (a run takes one
    of them, so the loader is prepared once), and the accelerator is made before the ``if`` (before: ACC020, 'prepare
    it where the model and optimizer are prepared', with no prepare anywhere)."""
    source = (TRAIN + "if 'distill' in version:\n" + STUDENTS + "    train(model, optimizer, loader)\nelse:\n"
              "    model = nn.Linear(4, 2)\n    optimizer = torch.optim.Adam(model.parameters())\n"
              "    train(model, optimizer, loader)\n")
    out = converted(source)
    assert out.count("accelerator.prepare(") == 2, out
    assert out.count("Accelerator(") == 1 and out.index("accelerator = Accelerator") < out.index("if 'distill'"), out
    assert ("        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n" + PREPARED + "    train(model") in out, out
    assert out.endswith("    train(model, optimizer, loader)\naccelerator.end_training()\n"), out
    assert ("    optimizer = torch.optim.Adam(model.parameters())\n" + PREPARED + "    train(model") in out, out


def test_a_branch_that_builds_and_trains_in_branches_of_its_own_beside_another_is_prepared_in_each() -> None:
    """The ``else`` builds its objects in an ``if/else`` of its own, each arm training: three trainings, three
    prepares, one accelerator before the outer ``if``."""
    source = (TRAIN + "if distill:\n    model = nn.Linear(4, 2)\n    optimizer = torch.optim.Adam(model.parameters())\n"
              "    train(model, optimizer, loader)\nelse:\n    if short:\n        model = nn.Linear(4, 2)\n"
              "        optimizer = torch.optim.Adam(model.parameters())\n        train(model, optimizer, loader)\n"
              "    else:\n        model = nn.Linear(4, 3)\n        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
              "        train(model, optimizer, loader)\n")
    out = converted(source)
    assert out.count("accelerator.prepare(") == 3, out
    assert out.count("Accelerator(") == 1 and out.index("accelerator = Accelerator") < out.index("if distill"), out
    assert "lr=0.1)\n        model, optimizer, loader = accelerator.prepare(model, optimizer, loader)\n        train(" in out


def test_a_branch_that_trains_without_binding_an_object_is_refused_naming_it() -> None:
    """The optimizer built only in the branch that does not train: in the branch that does, it is never bound."""
    source = (TRAIN + "if pretrain:\n    model = nn.Linear(4, 2)\n    optimizer = torch.optim.Adam(model.parameters())\n"
              "else:\n    model = nn.Linear(4, 2)\n    for x, y in loader:\n        model(x).sum().backward()\n"
              "        optimizer.step()\n")
    result = convert_source(dedent(source))
    assert [w.code for w in result.warnings] == ["ACC051"], result.warnings
    assert "(`optimizer`) are built in the branches of `if pretrain:`, and a branch that trains does not bind it" \
        in result.warnings[0].message


def test_a_loop_over_versions_that_builds_and_trains_prepares_each_pass() -> None:
    """The outer statement a loop (``for version in versions:``): each pass builds and trains a student of its own,
    a training per pass. It was refused with ACC007, whose advice (build them once, before the loop) would have made
    the versions one continued training; each pass now prepares its student after the chain, and the loader the
    passes share is prepared once, where it is built (prepared again per pass it would be sharded again)."""
    out = converted(TRAIN + "for version in versions:\n" + STUDENTS + "    train(model, optimizer, loader)\n")
    assert out.count("accelerator.prepare(") == 2 and out.count("Accelerator(") == 1, out
    assert "batch_size=4)\nloader = accelerator.prepare(loader)\nfor version in versions:\n" in out, out
    assert STUDENTS + "    model, optimizer = accelerator.prepare(model, optimizer)\n    train(model" in out, out


def test_a_model_placed_by_a_conditional_expression_is_prepared() -> None:
    """J4's ``model = net.Net(params).cuda() if params.cuda else net.Net(params)``: the same model placed or not. It
    had no role, so prepare left it out (``optimizer, loader = accelerator.prepare(optimizer, loader)``) and every
    process trained its own copy, silently. Prepared, its placement goes as a plain ``.cuda()`` does."""
    out = converted(TRAIN + "model = nn.Linear(4, 2).cuda() if torch.cuda.is_available() else nn.Linear(4, 2)\n"
                    "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\ntrain(model, optimizer, loader)\n")
    assert ("model = nn.Linear(4, 2)\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
            "model, optimizer, loader = accelerator.prepare(model, optimizer, loader)\n") in out, out


def test_a_conditional_expression_choosing_two_models_is_no_placement() -> None:
    """``A() if big else B()`` chooses between two models: neither is the other placed, so nothing is stripped."""
    out = converted(TRAIN + "model = nn.Linear(4, 2).cuda() if big else nn.Linear(4, 3)\n"
                    "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\ntrain(model, optimizer, loader)\n")
    assert "nn.Linear(4, 2).cuda() if big else nn.Linear(4, 3)" in out or \
        "nn.Linear(4, 2).to(accelerator.device) if big else nn.Linear(4, 3)" in out, out


def test_a_branch_that_trains_before_its_last_object_is_refused_as_created_after_the_training() -> None:
    """The ``else`` trains, then makes a new optimizer and trains again: no place in it comes after its objects and
    before its training (ACC008 on the late optimizer), where prepare after it would have wrapped a trained model."""
    source = (TRAIN + "if distill:\n    model = nn.Linear(4, 2)\n    optimizer = torch.optim.Adam(model.parameters())\n"
              "    train(model, optimizer, loader)\nelse:\n    model = nn.Linear(4, 2)\n"
              "    optimizer = torch.optim.Adam(model.parameters())\n    train(model, optimizer, loader)\n"
              "    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n    train(model, optimizer, loader)\n")
    assert codes(source) == ["ACC008:23"]


def test_a_teachers_data_parallel_stays_on_the_process_device_and_splits_no_batch() -> None:
    """J4's ``teacher_model = nn.DataParallel(teacher_model).cuda()`` for teachers pre-trained on several GPUs (their
    checkpoints' keys are ``module.*``): the wrapper went, so ``load_checkpoint`` failed on the keys, and the
    ``.cuda()`` with it; and it made the accelerator split each batch, as for a trained model's DataParallel. The
    teacher is no prepared model: its wrapper stays, on the process's device alone, and the batch stays the script's
    per process. The student's own DataParallel still goes."""
    source = (TRAIN + "model = nn.Linear(4, 2).cuda()\noptimizer = torch.optim.Adam(model.parameters())\n"
              "teacher = nn.Linear(4, 2)\nteacher = nn.DataParallel(teacher).cuda()\n"
              "teacher.load_state_dict(torch.load('teacher.pt'))\ntrain(model, optimizer, loader)\n")
    out = converted(source)
    assert "\nteacher = nn.DataParallel(teacher, device_ids=[accelerator.device]).to(accelerator.device)\n" in out, out
    assert "accelerator = Accelerator()\n" in out, out
    out = converted(source.replace("model = nn.Linear(4, 2).cuda()\n", "model = nn.DataParallel(nn.Linear(4, 2)).cuda()\n"))
    assert "model = nn.Linear(4, 2)\n" in out and "split_batches=True" in out, out


def test_an_object_bound_under_a_flag_in_one_of_two_branches_that_train_is_refused() -> None:
    """word_language_model's ``if use_optimizer: optimizer = ...`` in the first branch (its training steps it only
    under the same flag): prepared where it is built there, it would be missing from the prepare the ``else`` shares
    by name, which builds its optimizer unconditionally. ACC051 names it."""
    source = (TRAIN + "if distill:\n    model = nn.Linear(4, 2)\n    if use_optimizer:\n"
              "        optimizer = torch.optim.Adam(model.parameters())\n    for x, y in loader:\n"
              "        model(x).sum().backward()\n        if use_optimizer:\n            optimizer.step()\n"
              "else:\n    model = nn.Linear(4, 2)\n    optimizer = torch.optim.Adam(model.parameters())\n"
              "    train(model, optimizer, loader)\n")
    result = convert_source(dedent(source))
    assert [w.code for w in result.warnings] == ["ACC051"], result.warnings
    assert "(`optimizer`) are built in the branches of `if distill:`, and it is bound there only under a condition" \
        in result.warnings[0].message, result.warnings[0].message


def test_each_branch_prepares_after_its_scheduler_sized_by_the_loader() -> None:
    """SimCLR's per-epoch ``CosineAnnealingLR(optimizer, T_max=len(loader))`` built in the ``else`` right after the
    optimizer: its prepare goes after it, as the first branch's does, so it reads the original's length."""
    sched = "    sched = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=len(loader))\n"
    source = (TRAIN + "if distill:\n    model = nn.Linear(4, 2)\n    optimizer = torch.optim.Adam(model.parameters())\n"
              + sched + "    for epoch in range(2):\n        train(model, optimizer, loader)\n        sched.step()\n"
              "else:\n    model = nn.Linear(4, 3)\n    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
              + sched + "    for epoch in range(2):\n        train(model, optimizer, loader)\n        sched.step()\n")
    out = converted(source)
    assert out.count(sched + PREPARED) == 2, out
