"""A trainer class whose ``__init__`` builds the model and whose ``train(self)`` builds the optimizer and loaders
(set H's FernandoLpz ``Execute``): ``train`` holds all of them through ``self``, so ``prepare`` goes there, after
the last, when ``train`` runs once and nothing else of the class trains; otherwise the refusal names the method and
why (ACC045), not ACC014's "no place holds them"."""

from __future__ import annotations

from _convert import assert_converts, codes, converted, dedent

from accelify.pipeline import convert_source

EXECUTE = '''
import torch
from torch.utils.data import DataLoader, TensorDataset


class Execute:
    def __init__(self, epochs):
        self.epochs = epochs
        self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        self.model = torch.nn.Linear(4, 1).to(self.device)

    def train(self):
        self.loader_training = DataLoader(TensorDataset(torch.ones(8, 4), torch.ones(8, 1)), batch_size=2)
        self.loader_test = DataLoader(TensorDataset(torch.ones(4, 4), torch.ones(4, 1)))
        optimizer = torch.optim.RMSprop(self.model.parameters(), lr=0.01)
        for epoch in range(self.epochs):
            for x, y in self.loader_training:
                x, y = x.to(self.device), y.to(self.device)
                loss = torch.nn.functional.mse_loss(self.model(x), y)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            self.evaluation()

    def evaluation(self):
        predictions = []
        with torch.no_grad():
            for x, y in self.loader_test:
                y_pred = self.model(x.to(self.device))
                predictions += y_pred.squeeze(1).tolist()
        return predictions
{extra}

execute = Execute(2)
{calls}
'''


def test_the_method_that_builds_the_optimizer_and_loaders_prepares_them_with_the_model() -> None:
    assert_converts(
        EXECUTE.format(extra="", calls="execute.train()"),
        '''
        import torch
        from torch.utils.data import DataLoader, TensorDataset
        from accelify.runtime import Accelerator


        class Execute:
            def __init__(self, epochs):
                self.accelerator = Accelerator()
                self.epochs = epochs
                self.device = self.accelerator.device
                self.model = torch.nn.Linear(4, 1)

            def train(self):
                self.loader_training = DataLoader(TensorDataset(torch.ones(8, 4), torch.ones(8, 1)), batch_size=2)
                self.loader_test = DataLoader(TensorDataset(torch.ones(4, 4), torch.ones(4, 1)))
                optimizer = torch.optim.RMSprop(self.model.parameters(), lr=0.01)
                self.model, optimizer, self.loader_training, self.loader_test = self.accelerator.prepare(
                    self.model, optimizer, self.loader_training, self.loader_test
                )
                for epoch in range(self.epochs):
                    for x, y in self.loader_training:
                        loss = torch.nn.functional.mse_loss(self.model(x), y)
                        optimizer.zero_grad()
                        self.accelerator.backward(loss)
                        optimizer.step()
                    self.evaluation()
                self.accelerator.end_training()

            def evaluation(self):
                predictions = []
                with torch.no_grad():
                    for x, y in self.loader_test:
                        y_pred = self.model(x.to(self.device))
                        y_pred = self.accelerator.gather_for_metrics(y_pred)
                        predictions += y_pred.squeeze(1).tolist()
                return predictions


        execute = Execute(2)
        execute.train()
        ''',
    )


def test_loaders_kept_in_locals_and_passed_to_the_evaluation_are_prepared_there() -> None:
    source = (EXECUTE.format(extra="", calls="execute.train()")
              .replace("self.loader_training", "loader_training").replace("self.loader_test = ", "loader_test = ")
              .replace("self.evaluation()", "self.evaluation(loader_test)")
              .replace("def evaluation(self):", "def evaluation(self, loader):").replace("in self.loader_test", "in loader"))
    new = convert_source(dedent(source)).new
    assert ("self.model, optimizer, loader_training, loader_test = self.accelerator.prepare(\n"
            "            self.model, optimizer, loader_training, loader_test\n        )\n"
            "        for epoch in range(self.epochs):\n") in new, new
    assert "self.accelerator = Accelerator()" in new and "self.accelerator.gather_for_metrics(y_pred)" in new, new


def _refusal(source: str) -> str:
    result = convert_source(dedent(source))
    assert result.status != "converted" and result.new == dedent(source)
    assert [w.code for w in result.warnings] == ["ACC045"], [w.message for w in result.warnings]
    return result.warnings[0].message


def test_the_method_called_per_epoch_is_refused_naming_it_and_the_loop() -> None:
    source = EXECUTE.format(extra="", calls="for epoch in range(3):\n    execute.train()")
    assert codes(source) == ["ACC045:11"]
    message = _refusal(source)
    assert message.startswith("`Execute.train` builds objects to prepare and holds them with the model `__init__` "
                              "built (through `self`), but it is called in a loop (in the module body)"), message


def test_the_method_called_per_epoch_through_a_function_is_refused() -> None:
    source = EXECUTE.format(extra="", calls="def run():\n    execute.train()\n\n\nfor epoch in range(3):\n    run()")
    assert "it is called in a loop (in the module body)" in _refusal(source)


def test_the_method_called_twice_is_refused() -> None:
    source = EXECUTE.format(extra="", calls="execute.train()\nexecute.train()")
    assert "it is called 2 times" in _refusal(source)


def test_another_method_that_trains_from_outside_the_class_is_refused() -> None:
    pretrain = '''
    def pretrain(self, x, y):
        loss = torch.nn.functional.mse_loss(self.model(x), y)
        loss.backward()
        with torch.no_grad():
            for p in self.model.parameters():
                p -= 0.1 * p.grad
'''
    calls = "execute.pretrain(torch.ones(8, 4), torch.ones(8, 1))\nexecute.train()"
    message = _refusal(EXECUTE.format(extra=pretrain, calls=calls))
    assert "`Execute.pretrain` trains too, called from outside the class: run before it" in message, message


def test_the_model_saved_through_the_instance_after_training_is_unwrapped() -> None:
    """After ``execute.train()`` the instance holds the prepared model: its state dict would have DDP's keys."""
    new = convert_source(dedent(EXECUTE.format(
        extra="", calls='execute.train()\ntorch.save(execute.model.state_dict(), "model.pt")'))).new
    assert 'torch.save(execute.accelerator.unwrap_model(execute.model).state_dict(), "model.pt")' in new, new


def test_a_spare_loader_in_train_leaves_prepare_in_init_where_everything_is_built() -> None:
    """``__init__`` builds the model, optimizer and loader; ``train()`` builds a loader no loop walks: only
    ``__init__`` is a place to prepare (not whichever of the two the analysis meets first)."""
    new = converted('''
    import torch
    from torch.utils.data import DataLoader, TensorDataset


    class Execute:
        def __init__(self):
            self.model = torch.nn.Linear(4, 1)
            self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)
            self.loader = DataLoader(TensorDataset(torch.ones(8, 4), torch.ones(8, 1)), batch_size=2)

        def train(self):
            spare = DataLoader(TensorDataset(torch.ones(8, 4), torch.ones(8, 1)), batch_size=4)
            print(len(spare))
            for x, y in self.loader:
                torch.nn.functional.mse_loss(self.model(x), y).backward()
                self.optimizer.step()


    execute = Execute()
    execute.train()
    ''')
    init = new[new.index("def __init__"):new.index("def train")]
    assert "self.model, self.optimizer, self.loader = self.accelerator.prepare(" in init, new
