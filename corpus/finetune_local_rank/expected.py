# coding=utf-8
""" Finetuning a sequence classifier, in the style of the 2019 Hugging Face examples/run_glue.py.

`--local_rank` (passed by torch.distributed.launch) picks between one process (maybe with DataParallel over the
visible GPUs) and one process per GPU with init_process_group; `--fp16` uses NVIDIA apex; gradient accumulation
divides the loss and steps every `--gradient_accumulation_steps` batches; the features are cached on disk by the first
process while the others wait at a barrier; tqdm bars and INFO logs only on the first process of each node. A tiny
transformer-ish encoder on synthetic token ids stands in for BERT.
"""
from __future__ import absolute_import, division, print_function

import argparse
import logging
import os
import random
import sys

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, RandomSampler, SequentialSampler, TensorDataset
from tqdm import tqdm, trange
from accelify.runtime import Accelerator, DistributedDataParallelKwargs

logger = logging.getLogger(__name__)


class TinyBertForSequenceClassification(nn.Module):
    def __init__(self, vocab_size=32, hidden_size=32, num_labels=2):
        super().__init__()
        self.config = dict(vocab_size=vocab_size, hidden_size=hidden_size, num_labels=num_labels)
        self.embeddings = nn.Embedding(vocab_size, hidden_size)
        self.LayerNorm = nn.LayerNorm(hidden_size)
        self.encoder = nn.Sequential(nn.Linear(hidden_size, hidden_size), nn.GELU())
        self.classifier = nn.Linear(hidden_size, num_labels)
        self.pooler = nn.Linear(hidden_size, hidden_size)  # unused by this head (BERT's pooler, for other tasks)

    def forward(self, input_ids, attention_mask=None, labels=None):
        h = self.encoder(self.LayerNorm(self.embeddings(input_ids)))
        mask = attention_mask.unsqueeze(-1).float()
        logits = self.classifier((h * mask).sum(1) / mask.sum(1))
        outputs = (logits,)
        if labels is not None:
            loss = nn.functional.cross_entropy(logits, labels)
            outputs = (loss,) + outputs
        return outputs  # (loss), logits

    def save_pretrained(self, save_directory):
        torch.save({"config": self.config, "state_dict": self.state_dict()}, os.path.join(save_directory, "pytorch_model.bin"))

    @classmethod
    def from_pretrained(cls, directory):
        saved = torch.load(os.path.join(directory, "pytorch_model.bin"))
        model = cls(**saved["config"])
        model.load_state_dict(saved["state_dict"])
        return model


def get_linear_schedule_with_warmup(optimizer, num_warmup_steps, num_training_steps):
    def lr_lambda(current_step):
        if current_step < num_warmup_steps:
            return float(current_step) / float(max(1, num_warmup_steps))
        return max(0.0, float(num_training_steps - current_step) / float(max(1, num_training_steps - num_warmup_steps)))
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda)


def set_seed(args):
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    if args.n_gpu > 0:
        torch.cuda.manual_seed_all(args.seed)


def make_features(n, max_seq_length, seed):
    """Sentences of random token ids; the label says whether token 7 occurs more often than token 11."""
    g = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(1, 32, (n, max_seq_length), generator=g)
    lengths = torch.randint(max_seq_length // 2, max_seq_length + 1, (n,), generator=g)
    attention_mask = (torch.arange(max_seq_length)[None, :] < lengths[:, None]).long()
    input_ids = input_ids * attention_mask
    labels = (((input_ids == 7).sum(1) + (input_ids < 9).sum(1) // 2) > ((input_ids == 11).sum(1) + 2)).long()
    return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


def train(args, train_dataset, model, accelerator):
    """ Train the model """
    args.train_batch_size = args.per_gpu_train_batch_size * max(1, args.n_gpu)
    train_sampler = RandomSampler(train_dataset)
    train_dataloader = DataLoader(train_dataset, sampler=train_sampler, batch_size=args.train_batch_size)

    t_total = len(train_dataloader) // args.gradient_accumulation_steps * args.num_train_epochs

    # Prepare optimizer and schedule (linear warmup and decay)
    no_decay = ['bias', 'LayerNorm.weight']
    optimizer_grouped_parameters = [
        {'params': [p for n, p in model.named_parameters() if not any(nd in n for nd in no_decay)], 'weight_decay': args.weight_decay},
        {'params': [p for n, p in model.named_parameters() if any(nd in n for nd in no_decay)], 'weight_decay': 0.0}
        ]
    optimizer = torch.optim.AdamW(optimizer_grouped_parameters, lr=args.learning_rate, eps=args.adam_epsilon)
    scheduler = get_linear_schedule_with_warmup(optimizer, num_warmup_steps=args.warmup_steps, num_training_steps=t_total)
    model, optimizer, train_dataloader, scheduler = accelerator.prepare(
        model, optimizer, train_dataloader, scheduler
    )

    # multi-gpu training (should be after apex fp16 initialization)
    # Distributed training (should be after apex fp16 initialization)
    # Train!
    logger.info("***** Running training *****")
    logger.info("  Num examples = %d", len(train_dataset))
    logger.info("  Num Epochs = %d", args.num_train_epochs)
    logger.info("  Gradient Accumulation steps = %d", args.gradient_accumulation_steps)
    logger.info("  Total optimization steps = %d", t_total)

    global_step = 0
    tr_loss, logging_loss = 0.0, 0.0
    model.zero_grad()
    train_iterator = trange(int(args.num_train_epochs), desc="Epoch", disable=not accelerator.is_local_main_process)
    set_seed(args)  # Added here for reproductibility (even between python 2 and 3)
    for _ in train_iterator:
        epoch_iterator = tqdm(train_dataloader, desc="Iteration", disable=not accelerator.is_local_main_process)
        for step, batch in enumerate(epoch_iterator):
            with accelerator.accumulate(model):
                model.train()
                inputs = {'input_ids':      batch[0],
                          'attention_mask': batch[1],
                          'labels':         batch[2]}
                outputs = model(**inputs)
                loss = outputs[0]  # model outputs are always tuple in transformers (see doc)

                if args.n_gpu > 1:
                    loss = loss.mean() # mean() to average on multi-gpu parallel training

                accelerator.backward(loss)

                tr_loss += (loss / args.gradient_accumulation_steps).item()
                if accelerator.sync_gradients:
                    accelerator.clip_grad_norm_(model.parameters(), args.max_grad_norm)

                optimizer.step()
                scheduler.step()  # Update learning rate schedule
                optimizer.zero_grad()
            if accelerator.sync_gradients:
                global_step += 1

                if accelerator.is_local_main_process and args.logging_steps > 0 and global_step % args.logging_steps == 0:
                    logger.info("step %d: lr %.6f loss %.6f", global_step, scheduler.get_last_lr()[0],
                                (tr_loss - logging_loss) / args.logging_steps)
                    logging_loss = tr_loss

                if accelerator.is_local_main_process and args.save_steps > 0 and global_step % args.save_steps == 0:
                    # Save model checkpoint
                    output_dir = os.path.join(args.output_dir, 'checkpoint-{}'.format(global_step))
                    if not os.path.exists(output_dir):
                        os.makedirs(output_dir)
                    model_to_save = accelerator.unwrap_model(model)  # Take care of distributed/parallel training
                    model_to_save.save_pretrained(output_dir)
                    torch.save(args, os.path.join(output_dir, 'training_args.bin'))
                    logger.info("Saving model checkpoint to %s", output_dir)

            if args.max_steps > 0 and global_step > args.max_steps:
                epoch_iterator.close()
                break
        if args.max_steps > 0 and global_step > args.max_steps:
            train_iterator.close()
            break
    tr_loss = accelerator.reduce(torch.tensor(tr_loss, dtype=torch.float64, device=accelerator.device), "mean").item()

    return global_step, tr_loss / global_step


def evaluate(args, model, prefix=""):
    eval_dataset = TensorDataset(*make_features(160, args.max_seq_length, seed=2).values())
    args.eval_batch_size = args.per_gpu_eval_batch_size * max(1, args.n_gpu)
    # Note that DistributedSampler samples randomly
    eval_sampler = SequentialSampler(eval_dataset)
    eval_dataloader = DataLoader(eval_dataset, sampler=eval_sampler, batch_size=args.eval_batch_size)

    # Eval!
    logger.info("***** Running evaluation {} *****".format(prefix))
    eval_loss = 0.0
    nb_eval_steps = 0
    preds = None
    out_label_ids = None
    for batch in tqdm(eval_dataloader, desc="Evaluating"):
        model.eval()
        batch = tuple(t.to(args.device) for t in batch)

        with torch.no_grad():
            inputs = {'input_ids':      batch[0],
                      'attention_mask': batch[1],
                      'labels':         batch[2]}
            outputs = model(**inputs)
            tmp_eval_loss, logits = outputs[:2]

            eval_loss += tmp_eval_loss.mean().item()
        nb_eval_steps += 1
        if preds is None:
            preds = logits.detach().cpu()
            out_label_ids = inputs['labels'].detach().cpu()
        else:
            preds = torch.cat((preds, logits.detach().cpu()), dim=0)
            out_label_ids = torch.cat((out_label_ids, inputs['labels'].detach().cpu()), dim=0)

    eval_loss = eval_loss / nb_eval_steps
    result = {"acc": (preds.argmax(dim=1) == out_label_ids).float().mean().item(), "loss": eval_loss}
    logger.info("***** Eval results {} *****".format(prefix))
    for key in sorted(result.keys()):
        logger.info("  %s = %.4f", key, result[key])
    return result


def load_and_cache_examples(args, accelerator):
    with accelerator.local_main_process_first():
        # Make sure only the first process in distributed training process the dataset, and the others will use the cache
        # Load data features from cache or dataset file
        cached_features_file = os.path.join(args.data_dir, 'cached_train_{}'.format(args.max_seq_length))
        if os.path.exists(cached_features_file) and not args.overwrite_cache:
            logger.info("Loading features from cached file %s", cached_features_file)
            features = torch.load(cached_features_file)
        else:
            logger.info("Creating features from dataset file at %s", args.data_dir)
            features = make_features(512, args.max_seq_length, seed=1)
            if accelerator.is_local_main_process:
                logger.info("Saving features into cached file %s", cached_features_file)
                os.makedirs(args.data_dir, exist_ok=True)
                torch.save(features, cached_features_file)

    # Make sure only the first process in distributed training process the dataset, and the others will use the cache
    # Convert to Tensors and build dataset
    dataset = TensorDataset(features["input_ids"], features["attention_mask"], features["labels"])
    return dataset


def main():
    parser = argparse.ArgumentParser()

    ## Required parameters
    parser.add_argument("--data_dir", default="glue_data", type=str, help="The input data dir.")
    parser.add_argument("--output_dir", default="output", type=str,
                        help="The output directory where the model predictions and checkpoints will be written.")

    ## Other parameters
    parser.add_argument("--max_seq_length", default=16, type=int, help="The maximum total input sequence length after tokenization.")
    parser.add_argument("--do_train", action='store_true', help="Whether to run training.")
    parser.add_argument("--do_eval", action='store_true', help="Whether to run eval on the dev set.")
    parser.add_argument("--per_gpu_train_batch_size", default=16, type=int, help="Batch size per GPU/CPU for training.")
    parser.add_argument("--per_gpu_eval_batch_size", default=32, type=int, help="Batch size per GPU/CPU for evaluation.")
    parser.add_argument('--gradient_accumulation_steps', type=int, default=2,
                        help="Number of updates steps to accumulate before performing a backward/update pass.")
    parser.add_argument("--learning_rate", default=5e-3, type=float, help="The initial learning rate for Adam.")
    parser.add_argument("--weight_decay", default=0.01, type=float, help="Weight deay if we apply some.")
    parser.add_argument("--adam_epsilon", default=1e-8, type=float, help="Epsilon for Adam optimizer.")
    parser.add_argument("--max_grad_norm", default=1.0, type=float, help="Max gradient norm.")
    parser.add_argument("--num_train_epochs", default=3.0, type=float, help="Total number of training epochs to perform.")
    parser.add_argument("--max_steps", default=-1, type=int, help="If > 0: set total number of training steps to perform. Override num_train_epochs.")
    parser.add_argument("--warmup_steps", default=4, type=int, help="Linear warmup over warmup_steps.")
    parser.add_argument('--logging_steps', type=int, default=4, help="Log every X updates steps.")
    parser.add_argument('--save_steps', type=int, default=16, help="Save checkpoint every X updates steps.")
    parser.add_argument("--no_cuda", action='store_true', help="Avoid using CUDA when available")
    parser.add_argument('--overwrite_cache', action='store_true', help="Overwrite the cached training and evaluation sets")
    parser.add_argument('--seed', type=int, default=42, help="random seed for initialization")
    parser.add_argument('--fp16', action='store_true',
                        help="Whether to use 16-bit (mixed) precision (through NVIDIA apex) instead of 32-bit")
    parser.add_argument('--fp16_opt_level', type=str, default='O1',
                        help="For fp16: Apex AMP optimization level selected in ['O0', 'O1', 'O2', and 'O3'].")
    parser.add_argument("--local_rank", type=int, default=-1, help="For distributed training: local_rank")
    args = parser.parse_args()
    accelerator = Accelerator(
        cpu=args.no_cuda,
        mixed_precision="fp16" if args.fp16 else "no",
        gradient_accumulation_steps=args.gradient_accumulation_steps,
        kwargs_handlers=[DistributedDataParallelKwargs(find_unused_parameters=True)],
    )

    # Setup CUDA, GPU & distributed training
    if accelerator.num_processes == 1 or args.no_cuda:
        device = accelerator.device
        args.n_gpu = torch.cuda.device_count()
    else:  # Initializes the distributed backend which will take care of sychronizing nodes/GPUs
        device = accelerator.device
        args.n_gpu = 1
    args.device = device

    # Setup logging
    logging.basicConfig(format='%(levelname)s - %(name)s -   %(message)s', stream=sys.stdout,
                        level=logging.INFO if accelerator.is_local_main_process else logging.WARN)
    logger.warning("Process rank: %s, device: %s, n_gpu: %s, distributed training: %s, 16-bits training: %s",
                   args.local_rank, device, args.n_gpu, bool(accelerator.num_processes > 1), args.fp16)

    # Set seed
    set_seed(args)

    model = TinyBertForSequenceClassification()

    logger.info("Training/evaluation parameters: seed %d, accumulation %d", args.seed, args.gradient_accumulation_steps)

    # Training
    if args.do_train:
        train_dataset = load_and_cache_examples(args, accelerator)
        global_step, tr_loss = train(args, train_dataset, model, accelerator)
        logger.info(" global_step = %s, average loss = %.6f", global_step, tr_loss)

    # Saving best-practices: if you use defaults names for the model, you can reload it using from_pretrained()
    if args.do_train and (accelerator.num_processes == 1 or accelerator.is_main_process):
        # Create output directory if needed
        if not os.path.exists(args.output_dir) and accelerator.is_local_main_process:
            os.makedirs(args.output_dir)

        logger.info("Saving model checkpoint to %s", args.output_dir)
        # Save a trained model, configuration and tokenizer using `save_pretrained()`.
        # They can then be reloaded using `from_pretrained()`
        model_to_save = accelerator.unwrap_model(model)  # Take care of distributed/parallel training
        model_to_save.save_pretrained(args.output_dir)

        # Good practice: save your training arguments together with the trained model
        accelerator.save(args, os.path.join(args.output_dir, 'training_args.bin'))

    # Evaluation
    results = {}
    if args.do_eval and accelerator.is_local_main_process:
        model = TinyBertForSequenceClassification.from_pretrained(args.output_dir)
        model.to(args.device)
        results = evaluate(args, model)

    accelerator.end_training()
    return results


if __name__ == "__main__":
    main()
