"""A model whose parts each train with an optimizer of their own (``analysis/prepare_site.PrepareSite._held_as_parts``):
a GAN module holding ``gen`` and ``disc``, run through its own methods (``model.generate(z)``), the optimizers over
``model.gen.parameters()`` and ``model.disc.parameters()`` (set M's colourisation GAN; refused with a false ACC014).
The parts are prepared and assigned back, so the module's methods run them through their wrappers; the parent's own
``state_dict()`` after that is reported (ACC058)."""

from __future__ import annotations

from _convert import codes, converted

GAN = """import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class GAN(nn.Module):
    def __init__(self):
        super().__init__()
        self.gen = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 6))
        self.disc = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 1))

    def generate(self, z):
        return self.gen(z)

    def discriminate(self, x):
        return self.disc(x)


def main():
    torch.manual_seed(0)
    loader = DataLoader(TensorDataset(torch.randn(64, 6)), batch_size=8, shuffle=True)
    model = GAN()
    gen_opt = torch.optim.Adam(model.gen.parameters(), lr=1e-3)
    disc_opt = torch.optim.Adam(model.disc.parameters(), lr=1e-3)
    bce = nn.BCEWithLogitsLoss()
    for epoch in range(2):
        for (real,) in loader:
            z = torch.randn(real.size(0), 4)
            fake = model.generate(z)
            d_loss = bce(model.discriminate(real), torch.ones(real.size(0), 1)) + bce(model.discriminate(fake.detach()), torch.zeros(real.size(0), 1))
            disc_opt.zero_grad()
            d_loss.backward()
            disc_opt.step()
            g_loss = bce(model.discriminate(fake), torch.ones(real.size(0), 1))
            gen_opt.zero_grad()
            g_loss.backward()
            gen_opt.step()
        print(f"epoch {epoch} d {d_loss.item():.4f} g {g_loss.item():.4f}")
    torch.save(model.state_dict(), "gan.pt")
    torch.save(model.gen.state_dict(), "gen.pt")


if __name__ == "__main__":
    main()
"""


def test_the_parts_are_prepared_and_put_back_where_the_methods_read_them() -> None:
    new = converted(GAN)
    assert ("    model.gen, model.disc, gen_opt, disc_opt, loader = accelerator.prepare(\n"
            "        model.gen, model.disc, gen_opt, disc_opt, loader\n    )\n") in new
    assert "    def generate(self, z):\n        return self.gen(z)\n" in new  # the methods are the module's own
    assert '    accelerator.save(accelerator.unwrap_model(model.gen).state_dict(), "gen.pt")\n' in new
    assert codes(GAN) == ["ACC058:39"]


def test_a_part_trained_with_the_parent_is_not_taken_apart() -> None:
    """One optimizer over the whole module: the module is prepared, as before."""
    whole = GAN.replace("gen_opt = torch.optim.Adam(model.gen.parameters(), lr=1e-3)", "gen_opt = torch.optim.Adam(model.parameters(), lr=1e-3)")
    assert whole != GAN
    assert "model.gen, model.disc" not in converted(whole)
