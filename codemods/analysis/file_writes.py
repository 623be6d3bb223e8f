"""Which calls write a file every process names alike (``open(p, "w")``, ``json.dump``, ``savefig``,
``imageio.mimsave``, ``df.to_csv(p)``, a ``SummaryWriter``, the ``save`` of an animation or image, a library call named
like a write that is handed a path: ``analysis/named_writes.py``), and which start an experiment tracker's run: what
``rules/writes.py`` keeps to the main process."""

from __future__ import annotations

import libcst as cst

from accelify.codemods.analysis.facts import CallSite, Scope
from accelify.codemods.analysis.plan import Plan

# copies and moves write their destination, their second argument (``shutil.copyfile(last, best)`` after the main
# process saved ``last``: on the other processes it raced the save, FileNotFoundError, and every process wrote ``best``)
COPIES = ("shutil.copyfile", "shutil.copy", "shutil.copy2", "shutil.move", "os.rename", "os.replace")
_IMAGEIO = ("mimsave", "mimwrite", "imwrite", "imsave", "volwrite", "volsave", "mvolwrite", "mvolsave")
# library functions that write a file whose path (or open file) they are handed
WRITERS = {
    "json.dump", "pickle.dump", "yaml.dump", "yaml.safe_dump", "toml.dump", "joblib.dump", "dill.dump",
    "cloudpickle.dump",
    "numpy.save", "numpy.savez", "numpy.savez_compressed", "numpy.savetxt",
    "matplotlib.pyplot.savefig", "matplotlib.pyplot.imsave", "matplotlib.image.imsave",
    "safetensors.torch.save_file", "safetensors.numpy.save_file",
    "torchvision.utils.save_image", "torchvision.io.write_png", "torchvision.io.write_jpeg",
    "torchvision.io.write_video", "torchvision.io.write_file",
    *(f"imageio.{f}" for f in _IMAGEIO), *(f"imageio.v2.{f}" for f in _IMAGEIO), "imageio.v3.imwrite",
    "cv2.imwrite", "skimage.io.imsave", "tifffile.imwrite", "tifffile.imsave", "nibabel.save",
    "scipy.io.savemat", "scipy.io.mmwrite", "scipy.io.wavfile.write", "scipy.misc.imsave",
    "soundfile.write", "torchaudio.save", "librosa.output.write_wav",
    *COPIES,
}
# methods that write the file named by their argument: a figure's, a pandas frame's (without a path, ``to_json()``
# returns the text; ``to_csv``/``to_parquet``/``to_feather``/``to_pickle`` are rules/shared_files.py's, which
# also puts a barrier before a read back), an array's ``tofile``
WRITE_METHODS = ("savefig", "write_text", "write_bytes")
PATH_METHODS = ("to_excel", "to_hdf", "to_json", "to_stata", "tofile")
WRITE_MODES = ("w", "a", "x")
# objects whose ``save(path)`` writes a file: a matplotlib animation (``anim.save("train.gif")``), a PIL image
FILE_OBJECTS = {"matplotlib.animation.ArtistAnimation", "matplotlib.animation.FuncAnimation",
                "PIL.Image.fromarray", "PIL.Image.open", "PIL.Image.new"}
# Loggers that write files of their own from every process that creates one.
# experiment trackers: a run per process on their servers (N runs of one training), never guarded by hand here
# (their later ``log`` calls would then fail on the other processes): reported (ACC024)
TRACKERS = {"wandb.init", "mlflow.start_run", "neptune.init_run", "neptune.init", "comet_ml.Experiment",
            "clearml.Task.init"}
TF_WRITERS = {"tensorflow.summary.FileWriter", "tensorflow.summary.create_file_writer",
              "tensorflow.compat.v1.summary.FileWriter"}
LOG_WRITERS = {"torch.utils.tensorboard.SummaryWriter", "tensorboardX.SummaryWriter", "torch.utils.tensorboard.writer.SummaryWriter"}


def writer_class(plan: Plan, site: CallSite) -> bool:
    """Whether ``site`` makes an instance of a logger class of the program (``logger_class``)."""
    function = plan.callee(site)
    if function is None or not isinstance(function.node, cst.FunctionDef) or function.node.name.value != "__init__":
        return False
    made = plan.classes.class_of(site.scope, site.node.func) or function.parent  # a subclass may inherit ``__init__``
    return made is not None and logger_class(plan, made)


def logger_class(plan: Plan, cls: Scope) -> bool:
    """Whether ``cls`` is a class of the program that only logs: its ``__init__`` opens a log or a file for writing
    (a ``Logger`` wrapping a TensorBoard or TensorFlow summary writer), and no method of it trains (calls, through
    the program, a ``backward`` or an optimizer's ``step``). A trainer that makes a ``SummaryWriter`` in its
    ``__init__`` (SimCLR's) is no logger: kept to the main process, only that process would train. The writes rule
    makes an instance of a logger class on the main process only, and the save rule keeps collectives out of its
    methods (their calls then run on the main process alone)."""
    init = plan.classes.method(cls, "__init__")
    if init is None or not any(writes_file(s) or (s.qualname or "") in TF_WRITERS for s in init.calls):
        return False
    family, pending = {id(cls)}, [cls]  # its own methods and those it inherits (``class Trainer(BaseTrainer)``)
    while pending:
        for base in plan.classes.bases(pending.pop()):
            if id(base) not in family:
                family.add(id(base))
                pending.append(base)
    methods = [s for s in plan.facts.scopes if s.class_scope is not None and id(s.class_scope) in family]
    return not any(plan.reaches_backward(c) or _steps_optimizer(plan, c) for m in methods for c in m.calls)


def _steps_optimizer(plan: Plan, site: CallSite) -> bool:
    """``self.optimizer.step()`` / ``scaler.step(opt)``: an update of the parameters (a step of something the
    plan takes for an optimizer, or any ``step`` handed an argument, as a scaler's is)."""
    if site.method != "step" or not isinstance(site.node.func, cst.Attribute):
        return False
    found = plan.origin(site.scope, site.node.func.value)
    return bool(site.node.args) or (found is not None and found.role == "optimizer")


def writes_file(site: CallSite) -> bool:
    """``open(p, "w")``, ``Path(p).open("a")``, ``p.write_text(...)``, ``json.dump``-style writers, ``savefig``."""
    if site.qualname in WRITERS or site.method in WRITE_METHODS:
        return True
    if site.method in PATH_METHODS and site.node.args:
        return True
    if site.qualname in LOG_WRITERS:
        return True
    if site.qualname == "open":
        mode_position = 1
    elif site.method == "open" and not (site.qualname or "").startswith(("os.", "io.", "gzip.", "bz2.", "lzma.")):
        mode_position = 0  # pathlib: Path.open(mode)
    else:
        return False
    mode = next((a.value for a in site.node.args if a.keyword is not None and a.keyword.value == "mode"), None)
    positional = [a for a in site.node.args if a.keyword is None]
    if mode is None and len(positional) > mode_position:
        mode = positional[mode_position].value
    return isinstance(mode, cst.SimpleString) and any(c in str(mode.evaluated_value) for c in WRITE_MODES)


def saves_file_object(plan: Plan, site: CallSite) -> bool:
    """``anim.save("x.gif")`` where ``anim = animation.ArtistAnimation(...)``, ``Image.fromarray(a).save(p)``: the
    ``save`` of an object made by a constructor in FILE_OBJECTS, directly or through the name it is bound to."""
    if site.method != "save" or not isinstance(site.node.func, cst.Attribute):
        return False
    receiver = site.node.func.value
    made: cst.BaseExpression | None = receiver if isinstance(receiver, cst.Call) else None
    if isinstance(receiver, cst.Name):
        binding = plan.binding_of(site.scope, receiver.value)
        made = binding.value if binding is not None else None
    maker = plan.facts.sites.get(made) if isinstance(made, cst.Call) else None
    return maker is not None and (maker.qualname or "") in FILE_OBJECTS
