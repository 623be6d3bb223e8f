"""Model definitions and a small registry, as in timm's create_model()."""
import torch.nn as nn


class MLPMixerTiny(nn.Module):
    def __init__(self, num_classes=10, in_features=32, hidden=64, drop_rate=0.0):
        super().__init__()
        self.num_classes = num_classes
        self.stem = nn.Linear(in_features, hidden)
        self.block = nn.Sequential(nn.LayerNorm(hidden), nn.Linear(hidden, hidden), nn.GELU(), nn.Dropout(drop_rate))
        self.head = nn.Linear(hidden, num_classes)

    def forward(self, x):
        x = self.stem(x)
        return self.head(x + self.block(x))


_MODELS = {"mixer_tiny": MLPMixerTiny}


def create_model(name, num_classes, drop_rate=0.0):
    return _MODELS[name](num_classes=num_classes, drop_rate=drop_rate)
