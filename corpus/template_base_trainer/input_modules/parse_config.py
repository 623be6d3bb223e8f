"""A configuration that builds objects by name (as pytorch-template's ConfigParser does)."""


class ConfigParser:
    def __init__(self, config):
        self.config = config

    def __getitem__(self, name):
        return self.config[name]

    def init_obj(self, name, module, *args, **kwargs):
        """``config.init_obj('optimizer', torch.optim, params)`` is ``torch.optim.<type>(params, **args)``."""
        module_name = self[name]["type"]
        module_args = dict(self[name]["args"])
        module_args.update(kwargs)
        return getattr(module, module_name)(*args, **module_args)
