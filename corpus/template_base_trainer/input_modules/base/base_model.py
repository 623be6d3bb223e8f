import torch.nn as nn

__all__ = ["BaseModel"]


class BaseModel(nn.Module):
    def trainable(self):
        return sum(p.numel() for p in self.parameters() if p.requires_grad)
