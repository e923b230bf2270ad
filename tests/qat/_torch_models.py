"""Small torch models for the QAT tests (seeded weights and BatchNorm statistics that are not the identity)."""
import torch
from torch import nn


def _randomize_batch_norms(model: nn.Module) -> nn.Module:
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.BatchNorm2d):
                module.running_mean.uniform_(-0.2, 0.2)
                module.running_var.uniform_(0.5, 1.5)
                module.weight.uniform_(0.5, 1.5)
                module.bias.uniform_(-0.2, 0.2)
    return model.eval()


class ResidualNet(nn.Module):
    """Conv-BN-ReLU, a residual block (Conv-BN-ReLU, Conv-BN, Add, ReLU), MaxPool, Flatten, Linear: 3x10x10 -> 4."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
        self.first = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU())
        self.second = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8))
        self.pool = nn.MaxPool2d(2)
        self.classifier = nn.Linear(8 * 5 * 5, 4)

    def forward(self, images):
        features = self.stem(images)
        features = torch.relu(self.second(self.first(features)) + features)
        return self.classifier(torch.flatten(self.pool(features), 1))


class FanOutConcatNet(nn.Module):
    """One input read by two Convs; their ReLUs concatenated into a third Conv while `left` also feeds a fourth:
    ortx gives left, right and the Concat one shared scale, which torch quantized as two tensors."""

    def __init__(self):
        super().__init__()
        self.left, self.right = nn.Conv2d(3, 4, 3, padding=1), nn.Conv2d(3, 4, 1)
        self.merge, self.side = nn.Conv2d(8, 4, 1), nn.Conv2d(4, 4, 3, padding=1)
        with torch.no_grad():
            self.right.weight.mul_(4.0)  # right's range exceeds left's, so the Concat's range is not left's

    def forward(self, images):
        left, right = torch.relu(self.left(images)), torch.relu(self.right(images))
        return torch.flatten(self.merge(torch.cat([left, right], 1)) + self.side(left), 1)


def residual_net(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return _randomize_batch_norms(ResidualNet())


def fan_out_concat_net(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return FanOutConcatNet().eval()


def images(count: int, seed: int) -> torch.Tensor:
    return torch.randn(count, 3, 10, 10, generator=torch.Generator().manual_seed(seed))
