"""Warning codes: one per reason a pattern was left for a human, with the manual fix, and the rule that says it.

One message per code (a test fails on a code defined twice). ``rules`` names the rule files that raise the code
(``rules/<name>.py``; ``notebook_launch`` is the engine's notebook step): a test checks that exactly those files use
it, so "where is ACC026?" is one hop. The README's table lists every code.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Code:
    """A warning code, what it means, what to do by hand, and the rules that raise it."""

    code: str
    message: str
    fix: str
    rules: tuple[str, ...] = ()


UNKNOWN_CUDA = Code("ACC001", "`.cuda()` on an object of unknown origin was left as is", "replace it with `.to(accelerator.device)`", ("leftovers",))
UNKNOWN_TO_DEVICE = Code("ACC002", "`.to({device})` with a device of unknown origin was left as is", "use `accelerator.device`, or remove it if the object comes from a prepared data loader", ("leftovers",))
MANUAL_DISTRIBUTED = Code("ACC003", "manual distributed code (`{name}`) is not converted, so the file was left unchanged", "{fix}; then convert again", ("unsupported", "accelerator", "collectives", "micro_steps", "process_group", "sampler", "spawn", "leftovers"))
DATA_PARALLEL = Code("ACC004", "`{name}` wrapping is not converted, so the file was left unchanged", "remove the wrapper: `accelerator.prepare(model)` wraps the model for the processes; then convert again", ("ddp",))
AMP = Code("ACC005", "automatic mixed precision (`{name}`) is not converted", "use `Accelerator(mixed_precision=\"fp16\")`, `with accelerator.autocast():` and `accelerator.backward(loss)`, and drop the GradScaler", ("amp",))
ACCUMULATION = Code("ACC006", "gradient accumulation by hand is not converted", "use `Accelerator(gradient_accumulation_steps=k)` and `with accelerator.accumulate(model):` around the step", ("accumulation",))
MODEL_IN_LOOP = Code("ACC007", "`{name}` is created inside a loop, so it cannot be prepared once and the file was left unchanged", "create it before the loop (one model and optimizer for the whole run), then convert again", ("refusals",))
CREATED_AFTER_LOOP = Code("ACC008", "`{name}` is created after the training loop starts, so `accelerator.prepare` has no place to go", "create the model, optimizer and data loaders before the first loop", ("refusals",))
NO_ACCELERATOR_HERE = Code("ACC009", "`{name}` needs the accelerator, but it is not available here", "pass the `accelerator` to this function and use it", ("leftovers",))
BACKWARD_ARGS = Code("ACC010", "`backward` with positional arguments was left as is", "call `accelerator.backward(loss, gradient=...)` by hand", ("backward",))
DEVICE_NOT_REPLACED = Code("ACC011", "the device variable `{name}` could not be tied to the accelerator", "set it to `accelerator.device` after the accelerator is created", ("device",))
NOTHING_TO_PREPARE = Code("ACC012", "`backward` is called but no optimizer was found to prepare", "create the optimizer with `torch.optim` where the loop can reach it, or convert by hand; a module whose loop trains objects its caller builds (a trainer class) is converted from the entry script that builds them, with it", ("accelerator",))
CUDA_INDEX = Code("ACC013", "`.cuda({index})` names a device index", "use `.to(accelerator.device)`; each process already has its own device", ("tensors",))
BUILT_ELSEWHERE = Code("ACC014", "`{name}` cannot be followed to a place that holds the model, optimizer and data loaders together, so `accelerator.prepare` has no place to go and the file was left unchanged", "build them in one function, or pass them to the one that trains (as arguments or return values), then convert again", ("refusals",))
CUDA_KEYWORD = Code("ACC015", "`device=\"cuda\"` passed to `{name}`, which is not a torch function, was left as is", "pass `device=accelerator.device` if `{name}` puts tensors on that device", ("tensors",))

LOCAL_METRIC = Code("ACC016", "the evaluation output here could not be gathered, so the metric stays each process's own", "name what the metric is computed from (`output = model(x)`, `preds = outputs.logits.argmax(-1)`) in its own statement and gather it with the targets: `preds, target = accelerator.gather_for_metrics((preds, target))`; an evaluation inside a method of the model (`model.accuracy(loader)`) is out of the accelerator's reach: move its loop into the script first", ("evaluation",))

LOCAL_EXIT = Code("ACC017", "a `{what}` out of a training loop on a value each process computes alone would leave the other processes waiting, and it cannot be moved, so the file was left unchanged", "decide on a value every process shares (`accelerator.reduce(...)`, gathered metrics), or use `accelerator.set_trigger()` where it stops and `if accelerator.check_trigger(): break` at the end of the loop body; then convert again", ("trigger",))

STARTUP_RACE = Code("ACC018", "`{name}` runs on every process, which may race to create the same files, and it was left as is", "create the folder with `os.makedirs(path, exist_ok=True)`, or run this under `with accelerator.main_process_first():` once the accelerator exists (files the others read back: under `if accelerator.is_main_process:`, then `accelerator.wait_for_everyone()` before they are read)", ("startup", "shared_files"))

RETRY = Code("ACC019", "this handler trains again after an error; on N processes an error one process raises alone (out of memory) leaves the others waiting in the first attempt", "make the retry decision shared (catch the error, then `accelerator.reduce` a flag every process contributes to), or remove the retry", ("retry",))

UNSHARDED = Code("ACC020", "the training loop walks `{name}` as it was before `accelerator.prepare`, so every process would train on all of its data and the file was left unchanged", "pass the prepared loader to where it is iterated (prepare it where the model and optimizer are prepared), then convert again", ("refusals",))
UNKNOWN_DATA = Code("ACC021", "the training loop walks `{name}`, which could not be followed to where it is built: if it is a DataLoader, every process sees all of it", "build the DataLoader where the model and optimizer are built, or pass it to `accelerator.prepare` by hand", ("refusals",))

SAME_DATA = Code("ACC022", "no DataLoader feeds this training loop, so every process trains on the same data (correct, but no faster than one)", "serve the data through a DataLoader that `accelerator.prepare` shards, or give each process its own part (`accelerator.process_index`, `accelerator.num_processes`)", ("seeds",))

MODEL_PARALLEL = Code("ACC023", "the model is split across devices by hand (model parallelism), which `accelerator.prepare` cannot keep (it puts the whole model on this process's one device), so the file was left unchanged", "keep each process's model on one device, or convert by hand with `Accelerator(device_placement=False)` and a set of devices per process", ("model_parallel",))
SHARED_WRITER = Code("ACC024", "`{name}` opens a file (or a log) on every process and writes to it later, so N processes write the same file (or N copies of the log), and it was left as is", "create it on the main process only (`{target} = ... if accelerator.is_main_process else None`) and guard its writes with `if accelerator.is_main_process:`, or give each process its own file (`f\"...{{accelerator.process_index}}\"`)", ("writes",))
FORWARD_METHOD = Code("ACC025", "training calls `{call}`, a method of the model that runs the model's forward or its layers itself (`self(...)`, `self.actor(...)`); on a prepared model that forward bypasses the DistributedDataParallel wrapper, so gradients would not be averaged and each process would train its own copy: the file was left unchanged", "run the forward through the prepared model in the training loop (`output = model(x)`, then the loss from `output`), or make this computation the model's `forward`; then convert again", ("forward_methods",))
SCHEDULER_IN_LOOP = Code("ACC027", "the scheduler `{name}` is created inside a loop, so it cannot be prepared once and is left out of `accelerator.prepare`", "create it before the loop, then pass it to `accelerator.prepare`", ("refusals",))
SELF_TRAINING_MODULE = Code("ACC026", "the training runs inside the model's own class (`{name}` builds and steps its optimizer): the accelerator would be made once per module, and `prepare` cannot wrap a model from inside it, so the file was left unchanged", "build the optimizer and run the loop outside the `nn.Module` (in a function, or a trainer class that receives the model), then convert again", ("refusals",))
SHARD_AVERAGE = Code("ACC028", "`{name}` is a running value over this process's shard of the data only (each process walks 1/N of the batches) and is read after the loop, but it could not be reduced, so it was left as is: on N processes it is one process's share", "make it global before it is read: reduce a sum or a count right after the loop where it is complete (`total = accelerator.reduce(torch.tensor(total, device=accelerator.device), \"sum\").item()`, then divide by a global count such as `len(loader.dataset)`), or gather the per-sample values with `accelerator.gather_for_metrics` and compute the metric from them", ("averages",))
LOG_EVERY_PROCESS = Code("ACC031", "`{name}` sets up logging on every process where the accelerator is not available (before it is created, or in a function that does not get it), so N processes write every record (and every log file) N times; it was left as is", "set logging up after `accelerator = Accelerator(...)`, under `if accelerator.is_main_process:` (the other processes then keep logging's default: warnings and errors, on stderr)", ("logging",))
UNSEEDED_DRAWS = Code("ACC032", "`{name}` draws values before training from a generator no seed sets, so each process draws different ones (a different data set or target on each), and it was left as is: {why}", "draw them alike on every process: set a seed before them (`torch.manual_seed(0)`, `np.random.seed(0)`), and where the training also draws as it goes, give each process its own stream after them (`torch.manual_seed(1 + accelerator.process_index)`)", ("shared_draws",))
GATHERED_SHAPE = Code("ACC033", "`{call}({size}, ...)` takes a tensor gathered from every process to hold the per-process batch size `{size}`; after the gather it holds every process's batch, so this would fail, or count one batch in N, on N processes, and it was left as is", "take the size from the gathered tensor (`t.view(t.size(0), ...)`, `-1` for the batch dimension, `range(len(t))` for its rows), or shape it before the gather", ("gathered_shapes",))
MODELS_IN_A_COLLECTION = Code("ACC036", "the optimizer trains models kept in a collection (`{name}`), which `accelerator.prepare` cannot wrap where they are used, so the file was left unchanged: unwrapped, each process would train its own copy", "prepare each model by name (`net_a, net_b, opt_a, opt_b = accelerator.prepare(net_a, net_b, opt_a, opt_b)`) and build the list from the prepared ones, then convert again", ("refusals",))
SECOND_EXPERIMENT = Code("ACC035", "`{name}` is built again after a training loop (a second experiment that re-binds the first one's names): one `accelerator.prepare` cannot serve both experiments, so the file was left unchanged", "put one experiment in a function that builds its model, optimizer and loaders and trains them (`def run(lr): ...`), call it once per experiment, then convert again: each call then prepares its own objects", ("refusals",))
PARAMETER_REPLACED = Code("ACC037", "`{name}` is replaced by a new `nn.Parameter` while the model runs (in `{method}`, as an EMA codebook is updated): the DistributedDataParallel wrapper keeps the parameters it was given, which then get no gradient (an error at the next step), and each process would keep values of its own, so the file was left unchanged", "keep such running values in buffers updated in place (`self.register_buffer(\"ema_w\", ...)`, `self.ema_w.mul_(decay).add_(...)`) and write them into the existing parameter under `torch.no_grad()` (`self.embedding.weight.copy_(...)`), reduced across processes if they must agree (`torch.distributed.all_reduce`); then convert again", ("forward_methods",))
NOT_A_LOADER = Code("ACC038", "the training loop walks `{name}`, a `{iterator}` and not a DataLoader: `accelerator.prepare` cannot shard it, so every process would walk all of the data, and the file was left unchanged", "serve the data through a `torch.utils.data.DataLoader` (over the same examples, with a `collate_fn` that pads and numericalizes a batch), or give each process its own part by hand; then convert again", ("refusals",))
NOTEBOOK_IN_PROCESS = Code("ACC101", "the notebook trains in its own process (the `Accelerator` is not created in a function its cells call), so it trains on one process only", "move the training (from the model to the last epoch) into a function, e.g. `def main():`, and run it with `notebook_launcher(main, (), num_processes=N)` in the last cell", ("notebook_launch",))
NOTEBOOK_LAUNCH_BY_HAND = Code("ACC102", "`{name}(...)` trains, but the call was left as is: {why}", "call `notebook_launcher({name}, args, num_processes=N)` instead (positional arguments only)", ("notebook_launch",))

ALL: tuple[Code, ...] = tuple(v for v in list(globals().values()) if isinstance(v, Code))
