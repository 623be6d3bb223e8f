"""Launched on 2 Gloo processes by tests/runtime/test_logging.py; prints log records to stdout."""

from __future__ import annotations

import logging
import sys
import time

import torch.distributed as dist

from accelify.runtime import get_logger

dist.init_process_group("gloo")
rank = dist.get_rank()
handler = logging.StreamHandler(sys.stdout)
handler.setFormatter(logging.Formatter("LOG %(levelname)s %(message)s @%(filename)s:%(lineno)d"))
logging.getLogger().addHandler(handler)

logger = get_logger("worker", log_level="DEBUG")
logger.debug("main only")  # line 20
logger.info("everyone", main_process_only=False)
if rank == 0:
    time.sleep(0.5)  # without ordering, process 1 would log first
logger.info("ordered", in_order=True)
logger.warning_once("once")
logger.warning_once("once")
sys.stdout.flush()
dist.barrier()
print(f"LOGGING-OK rank {rank}", flush=True)
dist.destroy_process_group()
