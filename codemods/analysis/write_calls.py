"""Which library calls write a file they are handed (``json.dump``, ``savefig``, ``imageio.mimsave``, ``open(p,
"w")``...), read from the call alone. ``file_writes.py`` adds what needs the plan (a program's logger classes, the
``save`` of an image object); the plan itself asks this module (an evaluation that writes a file per item,
``data_passes.py``), so it imports nothing of the plan."""

from __future__ import annotations

import libcst as cst

from accelify.codemods.analysis.facts import CallSite

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
LOG_WRITERS = {"torch.utils.tensorboard.SummaryWriter", "tensorboardX.SummaryWriter", "torch.utils.tensorboard.writer.SummaryWriter",
               "visdom.Visdom"}  # (visdom: a plot server every process would append its own points to)


TABLE_WRITES = ("to_csv", "to_parquet", "to_feather", "to_pickle")  # a pandas table written to a path

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
    mode = mode_argument(site.node, mode_position)
    return isinstance(mode, cst.SimpleString) and any(c in str(mode.evaluated_value) for c in WRITE_MODES)


def mode_argument(call: cst.Call, position: int) -> cst.BaseExpression | None:
    """The mode an ``open`` call is given: ``mode=``, or its positional argument at ``position``; None if none."""
    mode = next((a.value for a in call.args if a.keyword is not None and a.keyword.value == "mode"), None)
    positional = [a for a in call.args if a.keyword is None]
    return mode if mode is not None or len(positional) <= position else positional[position].value
