"""A solver class whose `__init__` stores the loaders and calls `build_model()`, which builds the net and optimizer."""
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import optim


class TinyUNet(nn.Module):
    def __init__(self, img_ch=1, output_ch=1):
        super().__init__()
        self.down = nn.Sequential(nn.Conv2d(img_ch, 8, 3, padding=1), nn.ReLU())
        self.up = nn.Conv2d(8, output_ch, 1)

    def forward(self, x):
        return self.up(self.down(x))


class Solver(object):
    def __init__(self, config, train_loader, valid_loader):
        # Data loader
        self.train_loader = train_loader
        self.valid_loader = valid_loader

        # Models
        self.unet = None
        self.optimizer = None
        self.criterion = torch.nn.BCELoss()

        # Hyper-parameters
        self.lr = config.lr
        self.num_epochs = config.num_epochs
        self.device = torch.device('cuda' if torch.cuda.is_available() else 'cpu')
        self.build_model()

    def build_model(self):
        """Build the network and its optimizer."""
        self.unet = TinyUNet(img_ch=1, output_ch=1)
        self.optimizer = optim.Adam(list(self.unet.parameters()), self.lr, [0.5, 0.999])
        self.unet.to(self.device)

    def update_lr(self, lr):
        for param_group in self.optimizer.param_groups:
            param_group['lr'] = lr

    def reset_grad(self):
        self.unet.zero_grad()

    def train(self):
        lr = self.lr
        for epoch in range(self.num_epochs):
            self.unet.train(True)
            for i, (images, GT) in enumerate(self.train_loader):
                images = images.to(self.device)
                GT = GT.to(self.device)
                SR = self.unet(images)
                SR_probs = torch.sigmoid(SR)
                loss = self.criterion(SR_probs.view(SR_probs.size(0), -1), GT.view(GT.size(0), -1))
                self.reset_grad()
                loss.backward()
                self.optimizer.step()
            lr = lr * 0.5
            self.update_lr(lr)

            self.unet.eval()
            correct = 0
            total = 0
            with torch.no_grad():
                for images, GT in self.valid_loader:
                    images = images.to(self.device)
                    GT = GT.to(self.device)
                    SR = torch.sigmoid(self.unet(images))
                    correct += ((SR > 0.5).float() == GT).sum().item()
                    total += GT.numel()
            print('Epoch [%d/%d] last loss %.5f [Validation] Acc: %.4f' % (epoch + 1, self.num_epochs, loss.item(), correct / total))
