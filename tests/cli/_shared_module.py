"""Two scripts that call one helper, whose conversions edit it differently (``a``'s device parameter becomes the
accelerator; ``b`` passes a string, so the helper gains a parameter instead): ``convert`` and ``migrate`` plan
their writes alike."""

SHARED_HELPER = b"import torch\n\n\ndef fit(model, data, optimizer, device):\n    for x, y in data:\n" \
    b"        x = x.to(device)\n        loss = torch.nn.functional.mse_loss(model(x), y)\n        loss.backward()\n" \
    b"        optimizer.step()\n"
SHARED_HEAD = b"import torch\nfrom torch.utils.data import DataLoader, TensorDataset\n\nfrom helpers import fit\n\n"
SHARED_LOADER = b"loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=2)\n"
SHARED_A = SHARED_HEAD + b'device = torch.device("cuda" if torch.cuda.is_available() else "cpu")\n' \
    b"model = torch.nn.Linear(2, 1).to(device)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n" + SHARED_LOADER \
    + b"fit(model, loader, opt, device)\n"
SHARED_B = SHARED_HEAD + b"model = torch.nn.Linear(2, 1)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n" \
    + SHARED_LOADER + b'fit(model, loader, opt, "cpu")\n'
