"""WarnPreparedParts: a model whose parts are prepared (``model.gen, model.disc = accelerator.prepare(model.gen,
model.disc)``, ``analysis/prepare_site.PrepareSite._held_as_parts``) holds their DDP wrappers as attributes, so its
``state_dict()`` (and a pickle of the whole model) names their weights ``gen.module.*``: a checkpoint made from it after
``prepare`` does not load into the model the original builds. Each such read is reported (ACC058), with the
unwrapped parts as the fix; the parts themselves (``model.gen.state_dict()``) are unwrapped by the save rule.
"""

from __future__ import annotations

import libcst as cst

from accelify.codemods import codes
from accelify.codemods.analysis.names import dotted
from accelify.codemods.engine.context import Context
from accelify.codemods.engine.rule import Example, Rule

_READS = ("state_dict",)
_SAVES = ("torch.save",)


class WarnPreparedParts(Rule):
    name = "prepared_parts"
    description = "Report the state dict or pickle of a model whose parts are prepared."
    examples = (
        Example(
            before='''\
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class GAN(nn.Module):
    def __init__(self):
        super().__init__()
        self.gen = nn.Linear(4, 6)
        self.disc = nn.Linear(6, 1)


loader = DataLoader(TensorDataset(torch.randn(16, 6)), batch_size=4)
model = GAN()
gen_opt = torch.optim.Adam(model.gen.parameters())
disc_opt = torch.optim.Adam(model.disc.parameters())
for (real,) in loader:
    fake = model.gen(torch.randn(real.size(0), 4))
    model.disc(fake).mean().backward()
    disc_opt.step()
    gen_opt.step()
torch.save(model.state_dict(), "gan.pt")
''',
            after='''\
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator


accelerator = Accelerator(cpu=True)


class GAN(nn.Module):
    def __init__(self):
        super().__init__()
        self.gen = nn.Linear(4, 6)
        self.disc = nn.Linear(6, 1)


loader = DataLoader(TensorDataset(torch.randn(16, 6)), batch_size=4)
model = GAN()
gen_opt = torch.optim.Adam(model.gen.parameters())
disc_opt = torch.optim.Adam(model.disc.parameters())
model.gen, model.disc, gen_opt, disc_opt, loader = accelerator.prepare(
    model.gen, model.disc, gen_opt, disc_opt, loader
)
for (real,) in loader:
    fake = model.gen(torch.randn(real.size(0), 4))
    accelerator.backward(model.disc(fake).mean())
    disc_opt.step()
    gen_opt.step()
accelerator.wait_for_everyone()
accelerator.save(model.state_dict(), "gan.pt")
accelerator.end_training()
''',
            warnings=("ACC058:22",),
        ),
        Example(  # the parts saved one by one: the save rule unwraps each, nothing to report
            before='''\
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class GAN(nn.Module):
    def __init__(self):
        super().__init__()
        self.gen = nn.Linear(4, 6)
        self.disc = nn.Linear(6, 1)


loader = DataLoader(TensorDataset(torch.randn(16, 6)), batch_size=4)
model = GAN()
gen_opt = torch.optim.Adam(model.gen.parameters())
disc_opt = torch.optim.Adam(model.disc.parameters())
for (real,) in loader:
    fake = model.gen(torch.randn(real.size(0), 4))
    model.disc(fake).mean().backward()
    disc_opt.step()
    gen_opt.step()
torch.save(model.gen.state_dict(), "gen.pt")
''',
            after='''\
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator


accelerator = Accelerator(cpu=True)


class GAN(nn.Module):
    def __init__(self):
        super().__init__()
        self.gen = nn.Linear(4, 6)
        self.disc = nn.Linear(6, 1)


loader = DataLoader(TensorDataset(torch.randn(16, 6)), batch_size=4)
model = GAN()
gen_opt = torch.optim.Adam(model.gen.parameters())
disc_opt = torch.optim.Adam(model.disc.parameters())
model.gen, model.disc, gen_opt, disc_opt, loader = accelerator.prepare(
    model.gen, model.disc, gen_opt, disc_opt, loader
)
for (real,) in loader:
    fake = model.gen(torch.randn(real.size(0), 4))
    accelerator.backward(model.disc(fake).mean())
    disc_opt.step()
    gen_opt.step()
accelerator.wait_for_everyone()
accelerator.save(accelerator.unwrap_model(model.gen).state_dict(), "gen.pt")
accelerator.end_training()
''',
            fires=False,
        ),
    )

    def run(self, ctx: Context) -> None:
        plan = ctx.plan
        scope, anchor = plan.prepare_scope, plan.prepare_after
        parts = [a.key for a in plan.aliases if a.obj.key.startswith("self.") and "." in a.key
                 and not a.key.startswith("self.")]
        if scope is None or anchor is None or not parts:
            return
        parents: dict[str, list[str]] = {}
        for key in parts:
            parent, _, attr = key.rpartition(".")
            parents.setdefault(parent, []).append(attr)
        for site in scope.calls:
            if not ctx.facts.after(site.stmt, anchor):
                continue
            func = site.node.func
            if isinstance(func, cst.Attribute) and func.attr.value in _READS:
                name, use = dotted(func.value), f"{func.attr.value}()"
            elif site.qualname in _SAVES and site.node.args:
                name, use = dotted(site.node.args[0].value), "pickle"
            else:
                continue
            if name in parents:
                attrs = parents[name]
                ctx.warn(codes.PREPARED_PARTS, site.node, name=name, parts=", ".join(f"`{name}.{a}`" for a in attrs),
                         use=use, part=attrs[0], part_attr=attrs[0])
