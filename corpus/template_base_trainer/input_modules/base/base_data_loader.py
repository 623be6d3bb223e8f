from torch.utils.data import DataLoader

__all__ = ["BaseDataLoader"]


class BaseDataLoader(DataLoader):
    """A DataLoader that remembers how many samples it serves."""

    def __init__(self, dataset, batch_size, shuffle):
        self.n_samples = len(dataset)
        super().__init__(dataset, batch_size=batch_size, shuffle=shuffle)
